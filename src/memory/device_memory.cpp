// Implements include/fitsum/memory/device_memory.h. The CUDA part is compiled only against a CUDA LibTorch
// (FITSUM_WITH_CUDA, set by CMake when the torch_cuda target exists).
#include "fitsum/memory/device_memory.h"

#include "fitsum/memory/tracking_allocator.h"

#include <algorithm>

#ifdef FITSUM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace fitsum::memory {

void start_tracking(const c10::Device& device) {
  if (device.is_cpu()) TrackingCpuAllocator::instance();
}

MemorySnapshot read_memory(const c10::Device& device) {
  MemorySnapshot s;
#ifdef FITSUM_WITH_CUDA
  if (device.is_cuda()) {
    namespace cca = c10::cuda::CUDACachingAllocator;
    const auto stats = cca::getDeviceStats(device.index() < 0 ? 0 : device.index());
    const auto aggregate = static_cast<std::size_t>(cca::StatType::AGGREGATE);
    s.current_bytes = stats.allocated_bytes[aggregate].current;
    s.peak_bytes = stats.allocated_bytes[aggregate].peak;
    s.peak_reserved_bytes = stats.reserved_bytes[aggregate].peak;
    s.alloc_retries = stats.num_alloc_retries;
    s.ooms = stats.num_ooms;
    return s;
  }
#endif
  const auto& tracker = TrackingCpuAllocator::instance();
  s.current_bytes = tracker.current_bytes();
  s.peak_bytes = tracker.peak_bytes();
  s.peak_reserved_bytes = s.peak_bytes;
  s.ooms = tracker.refused_allocations();
  return s;
}

void reset_peak_memory(const c10::Device& device) {
#ifdef FITSUM_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
    return;
  }
#endif
  TrackingCpuAllocator::instance().reset_peak();
}

void set_memory_limit(const c10::Device& device, std::int64_t bytes) {
#ifdef FITSUM_WITH_CUDA
  if (device.is_cuda()) {
    const int index = device.index() < 0 ? 0 : device.index();
    const auto total = static_cast<double>(at::cuda::getDeviceProperties(index)->totalGlobalMem);
    c10::cuda::CUDACachingAllocator::setMemoryFraction(
        bytes > 0 ? std::min(1.0, static_cast<double>(bytes) / total) : 1.0, index);
    return;
  }
#endif
  TrackingCpuAllocator::instance().set_limit(bytes);
}

}  // namespace fitsum::memory
