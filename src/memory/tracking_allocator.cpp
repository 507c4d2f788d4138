// Implements include/fitsum/memory/tracking_allocator.h. Each allocation gets a small context that owns the wrapped
// allocator's DataPtr and remembers its size; the deleter gives the bytes back to the counters.
#include "fitsum/memory/tracking_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include "fitsum/util/bytes.h"

namespace fitsum::memory {

namespace {

// Every block starts with a header holding its size and the count it was taken from (device or host), so the
// deleter needs nothing but the data pointer: LibTorch's raw_allocate() requires the DataPtr's context to be the
// data pointer itself.
constexpr std::size_t kHeaderBytes = 64;  // keeps the data 64-byte aligned, as c10's own allocator does

std::atomic<std::int64_t>* g_current = nullptr;
std::atomic<std::int64_t>* g_host_current = nullptr;
c10::DeleterFnPtr g_free_block = nullptr;  // the replaced allocator's raw deleter

// The header's second word: which count the block was taken from.
constexpr std::int64_t kDeviceBlock = 0;
constexpr std::int64_t kHostBlock = 1;

thread_local int t_host_scopes = 0;

void release_block(void* data) {
  if (data == nullptr) return;
  auto* base = static_cast<char*>(data) - kHeaderBytes;
  const auto* header = reinterpret_cast<const std::int64_t*>(base);
  (header[1] == kHostBlock ? g_host_current : g_current)->fetch_sub(header[0]);
  g_free_block(base);
}

void raise_peak(std::atomic<std::int64_t>& peak, std::int64_t now) {
  std::int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

}  // namespace

TrackingCpuAllocator& TrackingCpuAllocator::instance() {
  // Never destroyed: tensors freed during static destruction still call back into it.
  static TrackingCpuAllocator* allocator = [] {
    auto* created = new TrackingCpuAllocator(c10::GetCPUAllocator());
    g_current = &created->current_;
    g_host_current = &created->host_current_;
    g_free_block = created->replaced_->raw_deleter();
    TORCH_CHECK(g_free_block != nullptr, "LibTorch's CPU allocator has no raw deleter; cannot track memory");
    c10::SetCPUAllocator(created, /*priority=*/100);
    return created;
  }();
  return *allocator;
}

HostMemoryScope::HostMemoryScope(bool enabled) : enabled_(enabled) {
  if (enabled_) ++t_host_scopes;
}

HostMemoryScope::~HostMemoryScope() {
  if (enabled_) --t_host_scopes;
}

c10::DataPtr TrackingCpuAllocator::allocate(size_t bytes) FITSUM_ALLOCATE_CONST {
  const auto size = static_cast<std::int64_t>(bytes);
  if (t_host_scopes > 0) {
    raise_peak(host_peak_, host_current_.fetch_add(size) + size);
    char* base = nullptr;
    try {
      base = static_cast<char*>(replaced_->raw_allocate(bytes + kHeaderBytes));
    } catch (...) {
      host_current_.fetch_sub(size);
      throw;
    }
    auto* header = reinterpret_cast<std::int64_t*>(base);
    header[0] = size;
    header[1] = kHostBlock;
    void* data = base + kHeaderBytes;
    return {data, data, &release_block, c10::Device(c10::DeviceType::CPU)};
  }
  const std::int64_t limit = limit_.load();
  std::int64_t now = current_.fetch_add(size) + size;
  if (limit > 0 && now > limit) {
    current_.fetch_sub(size);
    refused_.fetch_add(1);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: tried to allocate ", util::format_bytes(bytes),
                     " with ", util::format_bytes(static_cast<std::uint64_t>(now - size)), " in use under a budget of ",
                     util::format_bytes(static_cast<std::uint64_t>(limit)), " (max_memory)");
  }
  raise_peak(peak_, now);
  char* base = nullptr;
  try {
    base = static_cast<char*>(replaced_->raw_allocate(bytes + kHeaderBytes));
  } catch (...) {
    current_.fetch_sub(size);
    throw;
  }
  auto* header = reinterpret_cast<std::int64_t*>(base);
  header[0] = size;
  header[1] = kDeviceBlock;
  void* data = base + kHeaderBytes;
  return {data, data, &release_block, c10::Device(c10::DeviceType::CPU)};
}

c10::DeleterFnPtr TrackingCpuAllocator::raw_deleter() const { return &release_block; }

}  // namespace fitsum::memory
