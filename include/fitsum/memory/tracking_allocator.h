// Exact CPU memory accounting: a c10::Allocator that wraps LibTorch's CPU allocator and counts the bytes of every
// live tensor allocation (current and peak, the peak resettable per phase). With a limit set it refuses an
// allocation that would exceed it by throwing c10::OutOfMemoryError, the error a GPU raises, so the whole
// out-of-memory story (fail fast, recover, re-plan) can be reproduced and tested on a CPU.
//
// Installed once per process (LibTorch keeps a raw pointer to it); memory allocated before installation is not
// counted. Thread-safe: counters are atomics.
#pragma once

#include <atomic>
#include <cstdint>

#include <c10/core/Allocator.h>

#include "fitsum/util/torch_compat.h"

namespace fitsum::memory {

class TrackingCpuAllocator final : public c10::Allocator {
 public:
  // The process-wide instance, installed as LibTorch's CPU allocator on first use.
  static TrackingCpuAllocator& instance();

  c10::DataPtr allocate(size_t bytes) FITSUM_ALLOCATE_CONST override;
  c10::DeleterFnPtr raw_deleter() const override;
#if FITSUM_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#endif

  std::int64_t current_bytes() const { return current_.load(); }
  std::int64_t peak_bytes() const { return peak_.load(); }
  // Starts a new measurement phase: the peak becomes the current usage.
  void reset_peak() { peak_.store(current_.load()); }
  // 0 = no limit.
  void set_limit(std::int64_t bytes) { limit_.store(bytes); }
  std::int64_t limit() const { return limit_.load(); }
  // Allocations refused because of the limit, since the start.
  std::int64_t refused_allocations() const { return refused_.load(); }

  // The host's own count, apart from the device's: what a thread allocates inside a HostMemoryScope (an offloaded
  // optimizer's state and buffers, which live in host memory while the training device is, on the CPU, the same
  // memory). Neither the device's peak nor its limit sees these bytes; a block is given back to the count it was
  // taken from, whichever thread frees it.
  std::int64_t host_current_bytes() const { return host_current_.load(); }
  std::int64_t host_peak_bytes() const { return host_peak_.load(); }
  void reset_host_peak() { host_peak_.store(host_current_.load()); }

 private:
  explicit TrackingCpuAllocator(c10::Allocator* replaced) : replaced_(replaced) {}

  c10::Allocator* replaced_;  // LibTorch's allocator before ours; blocks it handed out are freed by their own deleter
  mutable std::atomic<std::int64_t> current_{0};
  mutable std::atomic<std::int64_t> peak_{0};
  mutable std::atomic<std::int64_t> refused_{0};
  mutable std::atomic<std::int64_t> host_current_{0};
  mutable std::atomic<std::int64_t> host_peak_{0};
  std::atomic<std::int64_t> limit_{0};
};

// While alive, this thread's CPU allocations count as host memory (TrackingCpuAllocator::host_current_bytes);
// scopes nest. `enabled` false makes it a no-op, for code that counts host memory only in some runs.
class HostMemoryScope {
 public:
  explicit HostMemoryScope(bool enabled = true);
  ~HostMemoryScope();
  HostMemoryScope(const HostMemoryScope&) = delete;
  HostMemoryScope& operator=(const HostMemoryScope&) = delete;

 private:
  bool enabled_;
};

}  // namespace fitsum::memory
