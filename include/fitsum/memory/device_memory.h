// Memory as measured on the training device: the tracking allocator's exact counts on the CPU, the caching
// allocator's statistics on CUDA (allocated and reserved peaks, allocation retries, out-of-memory count).
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

namespace fitsum::memory {

struct MemorySnapshot {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;           // peak allocated since the last reset
  std::int64_t peak_reserved_bytes = 0;  // CUDA: the caching allocator's peak reservation; CPU: = peak_bytes
  std::int64_t alloc_retries = 0;        // CUDA: allocations that had to free cached blocks and retry
  std::int64_t ooms = 0;
};

// Starts measuring on `device` (installs the CPU tracking allocator on first use).
void start_tracking(const c10::Device& device);
MemorySnapshot read_memory(const c10::Device& device);
void reset_peak_memory(const c10::Device& device);
// Caps what tensors may hold on `device` (0: no cap): the tracking allocator's limit on the CPU, the caching
// allocator's memory fraction on CUDA. Allocations beyond it fail with c10::OutOfMemoryError.
void set_memory_limit(const c10::Device& device, std::int64_t bytes);

}  // namespace fitsum::memory
