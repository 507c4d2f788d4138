// What `fitsum bench train` records on CUDA for a GPU run to bring back (bench/gpu.sh): the caching allocator's
// history (memory/allocator_history.h) and a Kineto trace of two short steps (util/profiler_trace.h); and
// `fitsum bench allocator`, which replays such a history through fitsum's allocator model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <c10/core/Device.h>

#include "fitsum/memory/allocator_history.h"
#include "fitsum/util/profiler_trace.h"

namespace fitsum::cli {

struct BenchRecordOptions {
  std::string allocator;                     // --record_allocator FILE (gzip JSON)
  std::uint64_t allocator_entries = 300000;  // --record_allocator_entries: the trace buffer's size
  std::string profile;                       // --record_profile FILE (gzip chrome://tracing JSON)
  // Steps the profile covers, after the timed ones, and micro-steps in each: a step of 64 micro-steps would make a
  // trace 32 times the size, and every micro-step runs the same kernels.
  static constexpr int kProfiledSteps = 2;
  static constexpr std::int64_t kProfiledMicroSteps = 2;
};

void add_bench_record_flags(CLI::App& cmd, BenchRecordOptions& o);
// Throws std::invalid_argument naming the flag when it cannot record on `device` ("cpu" or "cuda").
void check_bench_records(const BenchRecordOptions& o, const std::string& device);
// With --record_allocator: the history, recording from now (before the model exists: the replay needs every
// allocation), with the budget of `max_memory` (empty: none) as its memory limit. Otherwise null.
std::unique_ptr<memory::AllocatorHistory> start_allocator_history(const BenchRecordOptions& o,
                                                                  const std::string& max_memory,
                                                                  const c10::Device& device);

}  // namespace fitsum::cli
