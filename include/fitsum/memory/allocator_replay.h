// The CUDA caching allocator's own record of a run, and fitsum's model of that allocator (cuda_allocator_model.h)
// replayed against it: where the two part ways.
//
// The record is what `fitsum bench train --record_allocator FILE` writes on CUDA (allocator_history.h), gzip JSON
// in the layout of PyTorch's memory snapshot (torch.cuda.memory._snapshot(), built by
// torch/csrc/cuda/memory_snapshot.cpp from c10/cuda/CUDACachingAllocator.h's SnapshotInfo), field for field, without
// stack frames (none are recorded):
//   {"segments": [{"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
//                  "segment_type": "small" | "large", "is_expandable",
//                  "blocks": [{"address", "size", "requested_size", "state"}]}],
//    "device_traces": [[{"action", "addr", "size", "stream", "time_us"}]],
//    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "..."},
//    "fitsum": {"memory_limit_bytes": N | null, "trace_entries_max": N, "trace_complete": true | false, ...}}
// The trace's actions are the allocator's TraceEntry::Action names: alloc, free_requested, free_completed,
// segment_alloc, segment_free, segment_map, segment_unmap, oom, snapshot.
//
// The replay feeds the trace's allocations and completed frees, in order, to CachingAllocatorModel under the
// recorded PYTORCH_CUDA_ALLOC_CONF and memory limit. The segment actions the allocator recorded before an allocation
// are what that allocation made it do (it records segment_alloc / segment_map, and segment_free when it released
// cached segments to retry, before the alloc); those recorded where no allocation follows are
// torch.cuda.empty_cache()'s, replayed as CachingAllocatorModel::release_cached. Each group is compared with what
// the model did for the same request, as a set (the order the allocator walks its pools in is not the model's).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fitsum/memory/cuda_allocator_model.h"

namespace fitsum::memory {

struct AllocatorTraceEntry {
  std::string action;
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
};

struct AllocatorRecord {
  std::string source;  // the file, for messages
  CudaAllocConf conf;
  std::uint64_t memory_limit = UINT64_MAX;  // the caching allocator's memory fraction in bytes; none: no limit
  std::vector<AllocatorTraceEntry> trace;   // of the one device that has entries
  bool trace_complete = true;               // false: the trace buffer overflowed, its first entries are lost
  std::uint64_t snapshot_reserved = 0;      // the segments' total_size at the snapshot
  std::int64_t snapshot_segments = 0;
};

// Reads a record (plain or gzip JSON). Throws std::runtime_error naming the file and the field when it cannot be
// read, is not JSON or lacks a field.
AllocatorRecord read_allocator_record(const std::filesystem::path& path);
AllocatorRecord parse_allocator_record(const nlohmann::json& j, const std::string& source);

struct ReplayDivergence {
  std::size_t index = 0;  // of the trace entry (0-based) where the allocator and the model differ first
  std::string request;    // the request that entry belongs to, e.g. "alloc of 4194304 bytes (entry 17)"
  std::string recorded;   // what the allocator did, e.g. "segment_alloc 20971520"
  std::string modelled;   // what the model did
};

struct ReplayReport {
  std::size_t entries = 0, allocations = 0, frees = 0, recorded_segment_actions = 0, model_segment_actions = 0;
  std::size_t divergent_requests = 0;  // requests whose segment actions differ
  std::optional<ReplayDivergence> first_divergence;
  std::uint64_t recorded_peak_allocated = 0;  // the trace's alloc sizes, live at once
  std::uint64_t recorded_peak_reserved = 0;   // the trace's segment actions summed
  std::uint64_t model_peak_allocated = 0;     // the model's blocks
  std::uint64_t model_peak_reserved = 0;
  std::uint64_t recorded_end_reserved = 0, model_end_reserved = 0;
  std::int64_t model_end_segments = 0;
};

// Throws std::runtime_error naming the entry when the trace frees an address it never allocated (it misses its
// start) or is incomplete.
ReplayReport replay_allocator_record(const AllocatorRecord& record);

// The report as lines of text, ending with a one-line verdict.
std::string describe_replay(const AllocatorRecord& record, const ReplayReport& report);

}  // namespace fitsum::memory
