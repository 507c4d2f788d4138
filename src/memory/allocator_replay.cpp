// Implements include/fitsum/memory/allocator_replay.h: the record read field by field, the trace replayed through
// CachingAllocatorModel request by request.
#include "fitsum/memory/allocator_replay.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>

#include "fitsum/util/bytes.h"
#include "fitsum/util/files.h"
#include "fitsum/util/gzip_file.h"

namespace fitsum::memory {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad_field(const std::string& source, const std::string& field, const std::string& what) {
  throw std::runtime_error(source + ": " + field + " " + what +
                           " (a record of fitsum bench train --record_allocator, docs/memory.md)");
}

const json& member(const json& o, const char* key, const std::string& where, const std::string& source) {
  const auto it = o.find(key);
  if (it == o.end()) bad_field(source, where + key, "is missing");
  return *it;
}

std::uint64_t count_field(const json& o, const char* key, const std::string& where, const std::string& source) {
  const auto& v = member(o, key, where, source);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
    bad_field(source, where + key, "is not a count (" + v.dump().substr(0, 40) + ")");
  }
  return v.get<std::uint64_t>();
}

std::vector<AllocatorTraceEntry> parse_trace(const json& traces, const std::string& source) {
  if (!traces.is_array()) bad_field(source, "device_traces", "is not a list of per-device lists");
  std::vector<AllocatorTraceEntry> trace;
  for (std::size_t d = 0; d < traces.size(); ++d) {
    const auto where = "device_traces[" + std::to_string(d) + "]";
    if (!traces[d].is_array()) bad_field(source, where, "is not a list");
    if (traces[d].empty()) continue;
    if (!trace.empty()) bad_field(source, where, "is a second device's trace (a record holds one device's)");
    for (std::size_t i = 0; i < traces[d].size(); ++i) {
      const auto& e = traces[d][i];
      const auto at = where + "[" + std::to_string(i) + "].";
      if (!e.is_object()) bad_field(source, at.substr(0, at.size() - 1), "is not an object");
      const auto& action = member(e, "action", at, source);
      if (!action.is_string()) bad_field(source, at + "action", "is not a string");
      trace.push_back({action.get<std::string>(), count_field(e, "addr", at, source), count_field(e, "size", at, source)});
    }
  }
  return trace;
}

}  // namespace

AllocatorRecord parse_allocator_record(const json& j, const std::string& source) {
  if (!j.is_object()) bad_field(source, "the record", "is not a JSON object");
  AllocatorRecord r;
  r.source = source;
  const auto& settings = member(j, "allocator_settings", "", source);
  const auto& conf = member(settings, "PYTORCH_CUDA_ALLOC_CONF", "allocator_settings.", source);
  if (!conf.is_string()) bad_field(source, "allocator_settings.PYTORCH_CUDA_ALLOC_CONF", "is not a string");
  try {
    r.conf = util::parse_cuda_alloc_conf(conf.get<std::string>(), "allocator_settings.PYTORCH_CUDA_ALLOC_CONF");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(source + ": " + e.what());
  }
  const auto& segments = member(j, "segments", "", source);
  if (!segments.is_array()) bad_field(source, "segments", "is not a list");
  for (std::size_t i = 0; i < segments.size(); ++i) {
    r.snapshot_reserved += count_field(segments[i], "total_size", "segments[" + std::to_string(i) + "].", source);
  }
  r.snapshot_segments = static_cast<std::int64_t>(segments.size());
  r.trace = parse_trace(member(j, "device_traces", "", source), source);
  const auto& fitsum = member(j, "fitsum", "", source);
  const auto& limit = member(fitsum, "memory_limit_bytes", "fitsum.", source);
  if (!limit.is_null()) r.memory_limit = count_field(fitsum, "memory_limit_bytes", "fitsum.", source);
  const auto& complete = member(fitsum, "trace_complete", "fitsum.", source);
  if (!complete.is_boolean()) bad_field(source, "fitsum.trace_complete", "is not true or false");
  r.trace_complete = complete.get<bool>();
  return r;
}

AllocatorRecord read_allocator_record(const std::filesystem::path& path) {
  const auto text = util::read_text_file(path, "the allocator record");
  return parse_allocator_record(util::parse_json(text, path.string()), path.string());
}

namespace {

std::string describe_actions(std::vector<SegmentAction> actions) {
  if (actions.empty()) return "no segment action";
  std::ostringstream out;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    out << (i ? ", " : "") << to_string(actions[i].kind) << " " << actions[i].bytes;
  }
  return out.str();
}

std::vector<SegmentAction> sorted(std::vector<SegmentAction> a) {
  std::sort(a.begin(), a.end(), [](const SegmentAction& x, const SegmentAction& y) {
    return std::pair{static_cast<int>(x.kind), x.bytes} < std::pair{static_cast<int>(y.kind), y.bytes};
  });
  return a;
}

std::optional<SegmentAction::Kind> segment_kind(const std::string& action) {
  if (action == "segment_alloc") return SegmentAction::Kind::alloc;
  if (action == "segment_free") return SegmentAction::Kind::free;
  if (action == "segment_map") return SegmentAction::Kind::map;
  if (action == "segment_unmap") return SegmentAction::Kind::unmap;
  return std::nullopt;
}

// The replay's state between entries.
struct Replay {
  const AllocatorRecord& record;
  CachingAllocatorModel model;
  ReplayReport report;
  std::map<std::uint64_t, std::pair<std::int64_t, std::uint64_t>> live;  // addr -> model handle, size
  std::vector<SegmentAction> pending;                                    // recorded, since the last request
  std::size_t pending_first = 0;                                         // the first one's entry
  std::uint64_t recorded_allocated = 0, recorded_reserved = 0;

  void compare(std::size_t index, const std::string& request) { compare(index, request, model.take_segment_actions()); }
  void compare(std::size_t index, const std::string& request, const std::vector<SegmentAction>& modelled) {
    report.model_segment_actions += modelled.size();
    if (sorted(modelled) != sorted(pending)) {
      ++report.divergent_requests;
      if (!report.first_divergence) {
        report.first_divergence = ReplayDivergence{pending.empty() ? index : pending_first, request,
                                                   describe_actions(pending), describe_actions(modelled)};
      }
    }
    pending.clear();
  }

  void segment(std::size_t index, SegmentAction::Kind kind, std::uint64_t bytes) {
    if (pending.empty()) pending_first = index;
    pending.push_back({kind, bytes});
    ++report.recorded_segment_actions;
    const bool grows = kind == SegmentAction::Kind::alloc || kind == SegmentAction::Kind::map;
    recorded_reserved = grows ? recorded_reserved + bytes : recorded_reserved - std::min(recorded_reserved, bytes);
    report.recorded_peak_reserved = std::max(report.recorded_peak_reserved, recorded_reserved);
  }

  // Recorded segment actions that no allocation asked for: torch.cuda.empty_cache()'s.
  void release_if_pending(std::size_t index) {
    if (pending.empty()) return;
    model.release_cached();
    compare(index, "empty_cache (entry " + std::to_string(pending_first) + ")");
  }

  // Segments given back before an allocation: its retry's (the model releases only when the limit is reached), or
  // an empty_cache() just before it. Both readings are tried; the one that matches the record is taken.
  std::int64_t allocate(std::uint64_t size, bool oom, std::vector<SegmentAction>& modelled) {
    const bool releases = std::any_of(pending.begin(), pending.end(), [](const SegmentAction& a) {
      return a.kind == SegmentAction::Kind::free || a.kind == SegmentAction::Kind::unmap;
    });
    if (releases) {
      auto emptied = model;
      emptied.release_cached();
      const auto handle = emptied.allocate(size);
      auto actions = emptied.take_segment_actions();
      if (oom == (handle < 0) && sorted(actions) == sorted(pending)) {
        model = std::move(emptied);
        modelled = std::move(actions);
        return handle;
      }
    }
    const auto handle = model.allocate(size);
    modelled = model.take_segment_actions();
    return handle;
  }

  void alloc(std::size_t index, const AllocatorTraceEntry& e, bool oom) {
    std::vector<SegmentAction> modelled;
    const auto handle = allocate(e.size, oom, modelled);
    const auto request = std::string(oom ? "the out-of-memory request of " : "alloc of ") + std::to_string(e.size) +
                         " bytes (entry " + std::to_string(index) + ")";
    if (oom != (handle < 0) && !report.first_divergence) {
      report.first_divergence = ReplayDivergence{index, request, oom ? "out of memory" : "allocated",
                                                 handle < 0 ? "out of memory" : "allocated"};
      ++report.divergent_requests;
    }
    compare(index, request, modelled);
    if (handle >= 0 && oom) model.free(handle);  // the allocator holds nothing for it: neither does the model
    if (handle < 0 || oom) return;
    if (!live.emplace(e.addr, std::pair{handle, e.size}).second) {
      throw std::runtime_error(record.source + ": device_traces entry " + std::to_string(index) +
                               " allocates address " + std::to_string(e.addr) + ", which is live already");
    }
    ++report.allocations;
    recorded_allocated += e.size;
    report.recorded_peak_allocated = std::max(report.recorded_peak_allocated, recorded_allocated);
  }

  void free(std::size_t index, const AllocatorTraceEntry& e) {
    release_if_pending(index);
    const auto it = live.find(e.addr);
    if (it == live.end()) {
      throw std::runtime_error(record.source + ": device_traces entry " + std::to_string(index) + " frees address " +
                               std::to_string(e.addr) +
                               " that the trace never allocated: the trace misses its start (record from the "
                               "process's start, with more --record_allocator_entries)");
    }
    model.free(it->second.first);
    recorded_allocated -= it->second.second;
    live.erase(it);
    ++report.frees;
    compare(index, "free of " + std::to_string(e.size) + " bytes (entry " + std::to_string(index) + ")");
  }
};

}  // namespace

ReplayReport replay_allocator_record(const AllocatorRecord& record) {
  if (!record.trace_complete) {
    throw std::runtime_error(record.source +
                             ": fitsum.trace_complete is false: the trace buffer overflowed and its first entries are "
                             "lost, so no replay can start from them (record with more --record_allocator_entries)");
  }
  Replay r{record, CachingAllocatorModel(record.conf, record.memory_limit), {}, {}, {}, 0, 0, 0};
  // A block returns to its pool when its free completes (free_requested alone when the trace has no completions).
  const bool completions = std::any_of(record.trace.begin(), record.trace.end(),
                                       [](const AllocatorTraceEntry& e) { return e.action == "free_completed"; });
  const std::string free_action = completions ? "free_completed" : "free_requested";
  for (std::size_t i = 0; i < record.trace.size(); ++i) {
    const auto& e = record.trace[i];
    if (const auto kind = segment_kind(e.action)) {
      r.segment(i, *kind, e.size);
    } else if (e.action == "alloc" || e.action == "oom") {
      r.alloc(i, e, e.action == "oom");
    } else if (e.action == free_action) {
      r.free(i, e);
    }
    r.report.model_peak_allocated = r.model.peak_allocated_bytes();
    r.report.model_peak_reserved = r.model.peak_reserved_bytes();
  }
  r.release_if_pending(record.trace.size());
  r.report.entries = record.trace.size();
  r.report.model_peak_allocated = r.model.peak_allocated_bytes();
  r.report.model_peak_reserved = r.model.peak_reserved_bytes();
  r.report.recorded_end_reserved = r.recorded_reserved;
  r.report.model_end_reserved = r.model.reserved_bytes();
  r.report.model_end_segments = r.model.segments();
  return r.report;
}

std::string describe_replay(const AllocatorRecord& record, const ReplayReport& r) {
  std::ostringstream out;
  const auto bytes = [](std::uint64_t b) { return util::format_bytes(b) + " (" + std::to_string(b) + ")"; };
  out << record.source << ": " << r.entries << " trace entries: " << r.allocations << " allocations, " << r.frees
      << " frees, " << r.recorded_segment_actions << " segment actions (the model: " << r.model_segment_actions
      << "); PYTORCH_CUDA_ALLOC_CONF '" << record.conf.text << "'\n";
  out << "peak allocated: recorded " << bytes(r.recorded_peak_allocated) << " (requests), model "
      << bytes(r.model_peak_allocated) << " (blocks)\n";
  out << "peak reserved:  recorded " << bytes(r.recorded_peak_reserved) << ", model " << bytes(r.model_peak_reserved)
      << "\n";
  out << "reserved at the end: recorded " << bytes(r.recorded_end_reserved) << ", model " << bytes(r.model_end_reserved)
      << "; the snapshot's " << record.snapshot_segments << " segments " << bytes(record.snapshot_reserved)
      << ", the model's " << r.model_end_segments << "\n";
  if (const auto& d = r.first_divergence) {
    out << "first divergence at entry " << d->index << ", " << d->request << ": the allocator did " << d->recorded
        << "; the model did " << d->modelled << "\n";
    out << "verdict: the model and the allocator part ways at entry " << d->index << " (" << r.divergent_requests
        << " of " << r.allocations + r.frees << " requests differ)\n";
  } else {
    out << "verdict: the model agrees with the allocator on every segment action (" << r.recorded_segment_actions
        << ")\n";
  }
  return out.str();
}

}  // namespace fitsum::memory
