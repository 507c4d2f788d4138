// Implements include/fitsum/util/device_timer.h. The CUDA part is compiled only against a CUDA LibTorch
// (FITSUM_WITH_CUDA).
#include "fitsum/util/device_timer.h"

#include <stdexcept>

#ifdef FITSUM_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace fitsum::util {

struct DeviceTimer::Events {
#ifdef FITSUM_WITH_CUDA
  at::cuda::CUDAEvent begin{cudaEventDefault};  // LibTorch's default flags turn timing off
  at::cuda::CUDAEvent end{cudaEventDefault};
#endif
};

DeviceTimer::DeviceTimer(const c10::Device& device) : device_(device) {
#ifdef FITSUM_WITH_CUDA
  if (device_.is_cuda()) events_ = std::make_unique<Events>();
#endif
}

DeviceTimer::~DeviceTimer() = default;

void DeviceTimer::start() {
#ifdef FITSUM_WITH_CUDA
  if (events_) {
    const c10::cuda::CUDAGuard guard(device_);
    events_->begin.record();  // on the current stream of the device
    return;
  }
#endif
  host_start_ = std::chrono::steady_clock::now();
}

double DeviceTimer::seconds() {
#ifdef FITSUM_WITH_CUDA
  if (events_) {
    const c10::cuda::CUDAGuard guard(device_);
    events_->end.record();
    events_->end.synchronize();
    return static_cast<double>(events_->begin.elapsed_time(events_->end)) / 1000.0;  // milliseconds
  }
#endif
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start_).count();
}

}  // namespace fitsum::util
