// What `fitsum bench train` and `fitsum bench matmul` share: the process setup `fitsum train` uses, the thread
// flags, and the small measuring helpers.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "fitsum/util/runtime.h"

namespace fitsum::cli {

using Clock = std::chrono::steady_clock;
constexpr double kMiB = 1024.0 * 1024.0;

double seconds_since(Clock::time_point start);
// Seconds since this process started (the kernel's start time, so loading LibTorch counts): what a user waits for
// the first step, comparable with bench/hf_trainer_bench.py's first_step_s. NaN where /proc is not there.
double seconds_since_process_start();
double median(std::vector<double> values);
// The process's peak resident set (VmHWM), as bench_eager.py reads it.
double peak_rss_mib();

struct ThreadFlags {
  int num_threads = 0;
  int blas_threads = 0;
  int update_threads = 0;
};
void add_thread_flags(CLI::App& cmd, ThreadFlags& t);
// The same process setup as `fitsum train` (util/runtime.h), so that benchmarks measure what training runs.
util::Runtime setup_bench_runtime(const ThreadFlags& t, const std::string& device, bool tune_host_allocator);
void synchronize(const torch::Device& device);
// A usage error naming `flag` when `value` is outside [low, high].
void check_range(std::int64_t value, std::int64_t low, std::int64_t high, const char* flag);

// `fitsum bench matmul`, under `bench`.
void add_bench_matmul_command(CLI::App& bench);

}  // namespace fitsum::cli
