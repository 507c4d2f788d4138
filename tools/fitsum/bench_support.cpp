// The helpers `fitsum bench train` and `fitsum bench matmul` share (bench_support.h).
#include "bench_support.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

#include <torch/cuda.h>

#include "fitsum/util/threads.h"

namespace fitsum::cli {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double seconds_since_process_start() {
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  double now = 0.0;
  const auto after_name = text.rfind(')');
  if (after_name == std::string::npos || !(uptime >> now)) return std::nan("");
  std::istringstream fields(text.substr(after_name + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
  }
  return now - std::stod(field) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const auto n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // "VmHWM:  123 kB"
  }
  return -1.0;
}

void add_thread_flags(CLI::App& cmd, ThreadFlags& t) {
  const auto defaults = util::default_thread_settings();
  cmd.add_option("--num_threads", t.num_threads,
                 "LibTorch intra-op threads (0: fitsum's default, " + std::to_string(defaults.intra_op) + ")");
  cmd.add_option("--blas_threads", t.blas_threads,
                 "BLAS threads for matrix products (0: fitsum's default, " +
                     (defaults.blas > 0 ? std::to_string(defaults.blas)
                                        : std::string("none to set: this BLAS runs on the intra-op threads")) +
                     ")");
  cmd.add_option(
      "--update_threads", t.update_threads,
      "intra-op threads of the optimizer step (0: fitsum's default, " + std::to_string(defaults.update) + ")");
}

util::Runtime setup_bench_runtime(const ThreadFlags& t, const std::string& device, bool tune_host_allocator) {
  if (device != "cpu" && device != "cuda")
    throw std::invalid_argument("--device '" + device + "' is not one of cpu, cuda");
  util::RuntimeOptions options;
  options.device = device;
  options.threads = {t.num_threads, t.blas_threads, t.update_threads};
  options.tune_host_allocator = tune_host_allocator;
  auto runtime = util::setup_runtime(options);
  for (const auto& warning : runtime.warnings) std::cerr << "fitsum: warning: " << warning << "\n";
  return runtime;
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

void check_range(std::int64_t value, std::int64_t low, std::int64_t high, const char* flag) {
  if (value < low || value > high) {
    throw std::invalid_argument(std::string(flag) + " must be in [" + std::to_string(low) + ", " +
                                std::to_string(high) + "], got " + std::to_string(value));
  }
}

}  // namespace fitsum::cli
