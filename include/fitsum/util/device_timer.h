// Times work on a device: on CUDA with two events recorded on the current stream around the work (the time the
// device spent between them, waiting only for the end event rather than for the whole device), elsewhere with the
// host's steady clock. What fitsum times this way: `fitsum bench` steps and products, the memory planner's probe.
#pragma once

#include <chrono>
#include <memory>

#include <c10/core/Device.h>

namespace fitsum::util {

class DeviceTimer {
 public:
  explicit DeviceTimer(const c10::Device& device);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  // Marks the start (again, when called again).
  void start();
  // Seconds from start() to now: on CUDA, once the work queued before this call has run.
  double seconds();

 private:
  struct Events;  // CUDA's, in a build against a CUDA LibTorch
  c10::Device device_;
  std::chrono::steady_clock::time_point host_start_;
  std::unique_ptr<Events> events_;
};

}  // namespace fitsum::util
