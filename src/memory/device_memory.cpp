// Implements include/fitsum/memory/device_memory.h. The CUDA part is compiled only against a CUDA LibTorch
// (FITSUM_WITH_CUDA, set by CMake when the torch_cuda target exists).
#include "fitsum/memory/device_memory.h"

#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/util/torch_compat.h"

#include <algorithm>
#include <cstdlib>

#ifdef FITSUM_WITH_CUDA
#include <cuda_runtime_api.h>
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
    const std::size_t aggregate = FITSUM_CUDA_AGGREGATE_STAT;
    s.current_bytes = stats.allocated_bytes[aggregate].current;
    s.peak_bytes = stats.allocated_bytes[aggregate].peak;
    s.peak_reserved_bytes = stats.reserved_bytes[aggregate].peak;
    s.reserved_bytes = stats.reserved_bytes[aggregate].current;
    s.alloc_retries = stats.num_alloc_retries;
    s.ooms = stats.num_ooms;
    return s;
  }
#endif
  const auto& tracker = TrackingCpuAllocator::instance();
  s.current_bytes = tracker.current_bytes();
  s.peak_bytes = tracker.peak_bytes();
  s.peak_reserved_bytes = s.peak_bytes;
  s.reserved_bytes = s.current_bytes;
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

void release_cached_memory(const c10::Device& device) {
#ifdef FITSUM_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    return;
  }
#endif
  (void)device;
}

CudaDeviceFacts cuda_device_facts(const c10::Device& device) {
  CudaDeviceFacts facts;
  if (const char* config = std::getenv("CUBLAS_WORKSPACE_CONFIG")) facts.cublas_workspace_config = config;
#ifdef FITSUM_WITH_CUDA
  if (device.is_cuda()) {
    const int index = device.index() < 0 ? 0 : device.index();
    const auto* properties = at::cuda::getDeviceProperties(index);
    facts.compute_major = properties->major;
    facts.compute_minor = properties->minor;
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      const auto reserved =
          c10::cuda::CUDACachingAllocator::getDeviceStats(index).reserved_bytes[FITSUM_CUDA_AGGREGATE_STAT].current;
      const auto used = static_cast<std::int64_t>(total_bytes - free_bytes);
      facts.context_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(0, used - reserved));
    }
  }
#endif
  return facts;
}

}  // namespace fitsum::memory
