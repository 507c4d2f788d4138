// The stacks check every sequence's ids against the vocabulary before the embedding lookup, because LibTorch's own
// check says only "index out of range in self" (and on CUDA is a device-side assertion that ends the process). That
// check reads the ids' range back to the host, which on CUDA waits for the device. While an IdsCheckedOnHost guard
// lives on a thread, the stacks skip it: the caller checked the ids on the host before copying them to the device
// (train/device_batch.h).
#pragma once

namespace fitsum::model {

class IdsCheckedOnHost {
 public:
  explicit IdsCheckedOnHost(bool checked = true);
  ~IdsCheckedOnHost();
  IdsCheckedOnHost(const IdsCheckedOnHost&) = delete;
  IdsCheckedOnHost& operator=(const IdsCheckedOnHost&) = delete;

 private:
  bool previous_;
};

// Whether an IdsCheckedOnHost guard is active on this thread.
bool ids_checked_on_host();

}  // namespace fitsum::model
