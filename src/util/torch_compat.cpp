// Implements the version-dependent helpers of include/fitsum/util/torch_compat.h.
#include "fitsum/util/torch_compat.h"

#include <ATen/autocast_mode.h>

namespace fitsum::util {

bool autocast_enabled(c10::DeviceType device) {
#if FITSUM_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

namespace {

c10::ScalarType autocast_dtype(c10::DeviceType device) {
#if FITSUM_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                        : at::autocast::get_autocast_gpu_dtype();
#endif
}

void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
#if FITSUM_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

}  // namespace

AutocastGuard::AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, bool enabled)
    : device_(device), enabled_(enabled) {
  if (!enabled_) return;
  previous_enabled_ = autocast_enabled(device_);
  previous_dtype_ = autocast_dtype(device_);
  set_autocast(device_, true, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  // Leaving the outermost region frees the cached low-precision copies of the weights.
  if (at::autocast::decrement_nesting() == 0) {
    at::autocast::clear_cache();
  }
  set_autocast(device_, previous_enabled_, previous_dtype_);
}

}  // namespace fitsum::util
