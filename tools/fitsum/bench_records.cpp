// Implements bench_records.h, and `fitsum bench allocator RECORD`: fitsum's model of the CUDA caching allocator
// replayed against the allocator's own record of a run (memory/allocator_replay.h); prints where the two part ways
// and a one-line verdict. The replay runs anywhere: the record is a file.
#include "bench_records.h"

#include <filesystem>
#include <iostream>
#include <utility>
#include <memory>
#include <stdexcept>

#include <c10/core/Device.h>

#include "commands.h"
#include "fitsum/memory/allocator_replay.h"
#include "fitsum/memory/planner.h"

namespace fitsum::cli {

void add_bench_record_flags(CLI::App& cmd, BenchRecordOptions& o) {
  cmd.add_option("--record_allocator", o.allocator,
                 "CUDA: record the caching allocator's history (every allocation, free and segment action, and the "
                 "segments at the end of the timed steps) into this gzip JSON file; fitsum bench allocator replays it");
  cmd.add_option("--record_allocator_entries", o.allocator_entries,
                 "with --record_allocator: the trace's entries at most (the recording stops early, between "
                 "micro-steps, rather than lose its first entries)")
      ->capture_default_str();
  cmd.add_option("--record_profile", o.profile,
                 "CUDA: after the timed steps, record two more steps of at most two micro-steps with LibTorch's "
                 "Kineto profiler into this gzip chrome://tracing file");
}

void check_bench_records(const BenchRecordOptions& o, const std::string& device) {
  const c10::Device d(device == "cuda" ? c10::kCUDA : c10::kCPU);
  if (!o.allocator.empty()) memory::check_allocator_history_available(d, "--record_allocator");
  if (!o.profile.empty()) util::check_profiler_trace_available(d, "--record_profile");
  // A file that cannot be written is a usage error now, not after the run.
  for (const auto& [flag, file] : {std::pair{"--record_allocator", o.allocator}, std::pair{"--record_profile", o.profile}}) {
    const auto folder = std::filesystem::path(file).parent_path();
    std::error_code error;
    if (!file.empty() && !folder.empty() && !std::filesystem::is_directory(folder, error)) {
      throw std::invalid_argument(std::string(flag) + " '" + file + "': the folder '" + folder.string() +
                                  "' does not exist");
    }
  }
  if (o.allocator_entries < 1000 || o.allocator_entries > (std::uint64_t{1} << 28)) {
    throw std::invalid_argument("--record_allocator_entries must be in [1000, 268435456], got " +
                                std::to_string(o.allocator_entries));
  }
}

std::unique_ptr<memory::AllocatorHistory> start_allocator_history(const BenchRecordOptions& o,
                                                                  const std::string& max_memory,
                                                                  const c10::Device& device) {
  if (o.allocator.empty()) return nullptr;
  const auto limit = max_memory.empty() ? 0 : memory::resolve_memory_budget(max_memory, device);
  return std::make_unique<memory::AllocatorHistory>(device, o.allocator, o.allocator_entries, limit);
}

void add_bench_allocator_command(CLI::App& bench) {
  auto record = std::make_shared<std::string>();
  auto* a = bench.add_subcommand("allocator",
                                 "Replay a recorded CUDA allocator history (bench train --record_allocator) through "
                                 "fitsum's allocator model; print where they part ways");
  a->add_option("record", *record, "the record (.json or .json.gz)")->required();
  a->callback([record]() {
    const auto r = memory::read_allocator_record(*record);
    std::cout << memory::describe_replay(r, memory::replay_allocator_record(r)) << std::flush;
  });
}

}  // namespace fitsum::cli
