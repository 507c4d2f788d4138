// Implements include/fitsum/util/random_state.h.
#include "fitsum/util/random_state.h"

#include <mutex>

#include <ATen/Context.h>

namespace fitsum::util {

namespace {

at::Generator default_generator(const c10::Device& device) {
  return at::globalContext().defaultGenerator(device.is_cuda() ? device : c10::Device(c10::kCPU));
}

}  // namespace

at::Tensor random_state(const c10::Device& device) {
  auto generator = default_generator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_random_state(const c10::Device& device, const at::Tensor& state) {
  auto generator = default_generator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

RandomStateGuard::RandomStateGuard(const c10::Device& device) : device_(device), saved_(random_state(device)) {}

RandomStateGuard::~RandomStateGuard() { set_random_state(device_, saved_); }

}  // namespace fitsum::util
