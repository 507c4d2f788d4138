// Implements include/fitsum/memory/tracking_allocator.h. Each allocation gets a small context that owns the wrapped
// allocator's DataPtr and remembers its size; the deleter gives the bytes back to the counters.
#include "fitsum/memory/tracking_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include "fitsum/util/bytes.h"

namespace fitsum::memory {

namespace {

// Every block starts with a header holding its size, so the deleter needs nothing but the data pointer: LibTorch's
// raw_allocate() requires the DataPtr's context to be the data pointer itself.
constexpr std::size_t kHeaderBytes = 64;  // keeps the data 64-byte aligned, as c10's own allocator does

std::atomic<std::int64_t>* g_current = nullptr;
c10::DeleterFnPtr g_free_block = nullptr;  // the replaced allocator's raw deleter

void release_block(void* data) {
  if (data == nullptr) return;
  auto* base = static_cast<char*>(data) - kHeaderBytes;
  g_current->fetch_sub(*reinterpret_cast<std::int64_t*>(base));
  g_free_block(base);
}

}  // namespace

TrackingCpuAllocator& TrackingCpuAllocator::instance() {
  // Never destroyed: tensors freed during static destruction still call back into it.
  static TrackingCpuAllocator* allocator = [] {
    auto* created = new TrackingCpuAllocator(c10::GetCPUAllocator());
    g_current = &created->current_;
    g_free_block = created->replaced_->raw_deleter();
    TORCH_CHECK(g_free_block != nullptr, "LibTorch's CPU allocator has no raw deleter; cannot track memory");
    c10::SetCPUAllocator(created, /*priority=*/100);
    return created;
  }();
  return *allocator;
}

c10::DataPtr TrackingCpuAllocator::allocate(size_t bytes) const {
  const auto size = static_cast<std::int64_t>(bytes);
  const std::int64_t limit = limit_.load();
  std::int64_t now = current_.fetch_add(size) + size;
  if (limit > 0 && now > limit) {
    current_.fetch_sub(size);
    refused_.fetch_add(1);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: tried to allocate ", util::format_bytes(bytes),
                     " with ", util::format_bytes(static_cast<std::uint64_t>(now - size)), " in use under a budget of ",
                     util::format_bytes(static_cast<std::uint64_t>(limit)), " (max_memory)");
  }
  std::int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  char* base = nullptr;
  try {
    base = static_cast<char*>(replaced_->raw_allocate(bytes + kHeaderBytes));
  } catch (...) {
    current_.fetch_sub(size);
    throw;
  }
  *reinterpret_cast<std::int64_t*>(base) = size;
  void* data = base + kHeaderBytes;
  return {data, data, &release_block, c10::Device(c10::DeviceType::CPU)};
}

c10::DeleterFnPtr TrackingCpuAllocator::raw_deleter() const { return &release_block; }

}  // namespace fitsum::memory
