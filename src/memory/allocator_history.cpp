// Implements include/fitsum/memory/allocator_history.h. The CUDA part compiles only against a CUDA LibTorch
// (FITSUM_WITH_CUDA); recordHistory's arguments grew over LibTorch 2.x, so the call is picked by what compiles.
#include "fitsum/memory/allocator_history.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <torch/version.h>

#include "fitsum/util/gzip_file.h"
#include "fitsum/util/torch_compat.h"

#ifdef FITSUM_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace fitsum::memory {

void check_allocator_history_available(const c10::Device& device, const std::string& flag) {
  if (!device.is_cuda()) {
    throw std::invalid_argument(flag + " needs --device cuda: it records the CUDA caching allocator's history (the "
                                       "CPU has no caching allocator)");
  }
#ifndef FITSUM_WITH_CUDA
  throw std::invalid_argument(flag + " needs a CUDA build of fitsum (this LibTorch " + std::string(TORCH_VERSION) +
                              " has no CUDA)");
#endif
}

#ifdef FITSUM_WITH_CUDA
namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

// recordHistory with the arguments this LibTorch takes (most first): skip_actions (2.10+), clearHistory, the
// record-context enum. No stack context is recorded (nullptr): the replay needs sizes and order only.
struct Older {};
struct Newer : Older {};
struct Newest : Newer {};
template <typename A>
auto record_history(A* a, bool on, std::size_t entries, Newest)
    -> decltype(a->recordHistory(on, nullptr, entries, cca::RecordContext::NEVER, true, std::vector<std::string>{})) {
  return a->recordHistory(on, nullptr, entries, cca::RecordContext::NEVER, true, std::vector<std::string>{});
}
template <typename A>
auto record_history(A* a, bool on, std::size_t entries, Newer)
    -> decltype(a->recordHistory(on, nullptr, entries, cca::RecordContext::NEVER, true)) {
  return a->recordHistory(on, nullptr, entries, cca::RecordContext::NEVER, true);
}
template <typename A>
auto record_history(A* a, bool on, std::size_t entries, Older)
    -> decltype(a->recordHistory(on, nullptr, entries, cca::RecordContext::NEVER)) {
  return a->recordHistory(on, nullptr, entries, cca::RecordContext::NEVER);
}
void record_history(bool on, std::size_t entries) { record_history(cca::get(), on, entries, Newest{}); }

// A trace entry's time in microseconds (snapshot() converts the approximate clock); 0 where it has none.
template <typename E>
auto time_us(const E& e, Newer) -> decltype(static_cast<std::int64_t>(e.time_.t_)) {
  return static_cast<std::int64_t>(e.time_.t_);
}
template <typename E>
std::int64_t time_us(const E&, Older) {
  return 0;
}

template <typename Action>
const char* action_name(Action action) {
  using A = std::decay_t<decltype(action)>;
  switch (action) {
    case A::ALLOC: return "alloc";
    case A::FREE_REQUESTED: return "free_requested";
    case A::FREE_COMPLETED: return "free_completed";
    case A::SEGMENT_ALLOC: return "segment_alloc";
    case A::SEGMENT_FREE: return "segment_free";
    case A::SEGMENT_MAP: return "segment_map";
    case A::SEGMENT_UNMAP: return "segment_unmap";
    case A::SNAPSHOT: return "snapshot";
    case A::OOM: return "oom";
    default: return "other";
  }
}

std::uint64_t pointer_value(const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); }

// The snapshot in the layout of torch.cuda.memory._snapshot() (allocator_replay.h), for one device.
nlohmann::ordered_json snapshot_json(int device) {
  const auto snapshot = cca::snapshot();
  nlohmann::ordered_json j;
  j["segments"] = nlohmann::ordered_json::array();
  for (const auto& s : snapshot.segments) {
    if (s.device != device) continue;
    nlohmann::ordered_json segment{{"device", static_cast<int>(s.device)},
                                   {"address", static_cast<std::uint64_t>(s.address)},
                                   {"total_size", static_cast<std::uint64_t>(s.total_size)},
                                   {"allocated_size", static_cast<std::uint64_t>(s.allocated_size)},
                                   {"active_size", static_cast<std::uint64_t>(s.active_size)},
                                   {"requested_size", static_cast<std::uint64_t>(s.requested_size)},
                                   {"stream", pointer_value(s.stream)},
                                   {"segment_type", s.is_large ? "large" : "small"},
                                   {"is_expandable", static_cast<bool>(s.is_expandable)}};
    segment["blocks"] = nlohmann::ordered_json::array();
    std::uint64_t address = s.address;
    for (const auto& b : s.blocks) {
      const char* state = b.allocated ? "active_allocated" : b.active ? "active_pending_free" : "inactive";
      segment["blocks"].push_back({{"address", address},
                                   {"size", static_cast<std::uint64_t>(b.size)},
                                   {"requested_size", static_cast<std::uint64_t>(b.requested_size)},
                                   {"state", state}});
      address += b.size;
    }
    j["segments"].push_back(std::move(segment));
  }
  j["device_traces"] = nlohmann::ordered_json::array();
  for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    auto trace = nlohmann::ordered_json::array();
    if (static_cast<int>(d) == device) {
      for (const auto& e : snapshot.device_traces[d]) {
        trace.push_back({{"action", action_name(e.action_)},
                         {"addr", static_cast<std::uint64_t>(e.addr_)},
                         {"size", static_cast<std::uint64_t>(e.size_)},
                         {"stream", pointer_value(e.stream_)},
                         {"time_us", time_us(e, Newer{})}});
      }
    }
    j["device_traces"].push_back(std::move(trace));
  }
  return j;
}

}  // namespace
#endif

AllocatorHistory::AllocatorHistory(const c10::Device& device, std::filesystem::path path, std::uint64_t max_entries,
                                   std::uint64_t memory_limit)
    : device_(device), path_(std::move(path)), max_entries_(max_entries), memory_limit_(memory_limit) {
  check_allocator_history_available(device, "--record_allocator");
#ifdef FITSUM_WITH_CUDA
  // CUDA's lazy initialisation creates the device's allocator, which the history is switched on in; an empty tensor
  // does it without allocating (no trace entry, no segment).
  torch::empty({0}, torch::TensorOptions().device(device_));
  record_history(true, max_entries_);
  start_count_ = last_count_ = entries_so_far();
#endif
}

AllocatorHistory::~AllocatorHistory() {
#ifdef FITSUM_WITH_CUDA
  if (!finished_) record_history(false, 0);
#endif
}

std::uint64_t AllocatorHistory::entries_so_far() const {
#ifdef FITSUM_WITH_CUDA
  // alloc + free_requested + free_completed per allocation, one per segment action (maps counted with segments).
  const auto stats = cca::getDeviceStats(device_.index() < 0 ? 0 : device_.index());
  const auto& a = stats.allocation[FITSUM_CUDA_AGGREGATE_STAT];
  const auto& s = stats.segment[FITSUM_CUDA_AGGREGATE_STAT];
  return static_cast<std::uint64_t>(a.allocated + 2 * a.freed + s.allocated + s.freed);
#else
  return 0;
#endif
}

void AllocatorHistory::between_steps() {
  if (finished_) return;
  const auto now = entries_so_far();
  largest_step_ = std::max(largest_step_, now - last_count_);
  last_count_ = now;
  ++steps_;
  if (now - start_count_ + 2 * largest_step_ > max_entries_) finish();
}

void AllocatorHistory::finish() {
  if (finished_) return;
  finished_ = true;
#ifdef FITSUM_WITH_CUDA
  const int device = device_.index() < 0 ? 0 : device_.index();
  auto j = snapshot_json(device);
  record_history(false, 0);
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  j["allocator_settings"] = {{"PYTORCH_CUDA_ALLOC_CONF", conf ? conf : ""}};
  const auto counted = entries_so_far() - start_count_;
  // The buffer keeps the last max_entries entries: a trace shorter than that lost none.
  std::uint64_t kept = 0;
  for (const auto& trace : j["device_traces"]) kept += trace.size();
  j["fitsum"] = {{"memory_limit_bytes", memory_limit_ > 0 ? nlohmann::ordered_json(memory_limit_) : nlohmann::ordered_json(nullptr)},
                 {"trace_entries_max", max_entries_},
                 {"trace_entries_counted", counted},
                 {"trace_complete", kept < max_entries_},
                 {"steps_recorded", steps_},
                 {"torch", TORCH_VERSION},
                 {"device", device_.str()}};
  util::write_gzip_file(path_, j.dump());
#endif
}

}  // namespace fitsum::memory
