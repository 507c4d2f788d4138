// Memory as measured on the training device: the tracking allocator's exact counts on the CPU, the caching
// allocator's statistics on CUDA (allocated and reserved peaks, allocation retries, out-of-memory count).
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

#include "fitsum/memory/cuda_allocator_model.h"

namespace fitsum::memory {

struct MemorySnapshot {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;           // peak allocated since the last reset
  std::int64_t peak_reserved_bytes = 0;  // CUDA: the caching allocator's peak reservation; CPU: = peak_bytes
  std::int64_t reserved_bytes = 0;       // CUDA: what the caching allocator holds now; CPU: = current_bytes
  std::int64_t alloc_retries = 0;        // CUDA: allocations that had to free cached blocks and retry
  std::int64_t ooms = 0;
};

// Starts measuring on `device` (installs the CPU tracking allocator on first use).
void start_tracking(const c10::Device& device);
MemorySnapshot read_memory(const c10::Device& device);
void reset_peak_memory(const c10::Device& device);
// Hands the caching allocator's unused cached segments back to the driver (torch.cuda.empty_cache()); nothing on
// the CPU, whose allocator caches nothing. Memory the planner's probe cached would otherwise stay reserved, where
// training could not always reuse it, and count in every later max_memory_reserved.
void release_cached_memory(const c10::Device& device);

// What the CUDA memory model needs from the device: its compute capability (cuBLAS's default workspace),
// CUBLAS_WORKSPACE_CONFIG, and the context's bytes (device memory in use beyond the caching allocator's
// reservation). Off CUDA, for a plan made on the CPU: an H100 / H200 (9.0) with the context estimated.
CudaDeviceFacts cuda_device_facts(const c10::Device& device);

}  // namespace fitsum::memory
