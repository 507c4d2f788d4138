// The default random generator of a device (the CPU's, or a CUDA device's): read its state, set it, and a guard
// that puts it back when a scope ends (also when an exception leaves the scope). Dropout draws from it, so every
// replay (activation checkpointing's recompute, the trainer's redo of a step after an out-of-memory error, resume)
// and every computation that must not shift the run's random numbers (the memory planner's probe) goes through here.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace fitsum::util {

at::Tensor random_state(const c10::Device& device);
void set_random_state(const c10::Device& device, const at::Tensor& state);

class RandomStateGuard {
 public:
  explicit RandomStateGuard(const c10::Device& device);
  ~RandomStateGuard();
  RandomStateGuard(const RandomStateGuard&) = delete;
  RandomStateGuard& operator=(const RandomStateGuard&) = delete;

  const at::Tensor& saved() const { return saved_; }

 private:
  c10::Device device_;
  at::Tensor saved_;
};

}  // namespace fitsum::util
