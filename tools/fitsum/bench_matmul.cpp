// `fitsum bench matmul`: the machine's fp32 matrix-product rate (an n x n x n product) with the products fitsum's
// model runs, the denominator of MFU, and with LibTorch's at::mm.
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bench_support.h"
#include "fitsum/kernels/onednn_linear.h"
#include "fitsum/util/device_timer.h"
#include "fitsum/util/host_allocator.h"
#include "fitsum/util/python_numbers.h"
#include "fitsum/util/threads.h"

namespace fitsum::cli {

namespace {

struct BenchMatmulOptions {
  std::int64_t size = 1024;
  double seconds = 1.0;
  std::string device = "cpu";
  ThreadFlags threads;
};

void run_bench_matmul(const BenchMatmulOptions& o) {
  // n x n fp32 operands: 65536 is 16 GiB each. A measuring time past a day is a mistake, not a benchmark (1e300
  // seconds would never end).
  check_range(o.size, 1, 65536, "--size");
  if (!(o.seconds >= 0 && o.seconds <= 86400)) {
    throw std::invalid_argument("--seconds must be in [0, 86400], got " + util::exact_decimal(o.seconds));
  }
  const auto runtime = setup_bench_runtime(o.threads, o.device, /*tune_host_allocator=*/false);
  const auto& device = runtime.device;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(0);
  auto a = torch::randn({o.size, o.size}, generator).to(device);
  auto b = torch::randn({o.size, o.size}, generator).to(device);
  // The median time of one product, after three to warm the threads and caches.
  const auto time_product = [&](const std::function<void()>& product) {
    for (int i = 0; i < 3; ++i) product();
    synchronize(device);
    std::vector<double> times;
    util::DeviceTimer timer(device);  // CUDA events around each product, or the host clock
    const auto begin = Clock::now();
    while (times.size() < 5 || seconds_since(begin) < o.seconds) {
      timer.start();
      product();
      times.push_back(timer.seconds());
    }
    return std::make_pair(median(times), times.size());
  };
  auto c = torch::empty({o.size, o.size}, a.options());
  const auto [libtorch_seconds, libtorch_repeats] = time_product([&] { torch::mm_out(c, a, b); });
  // The products fitsum's model runs (oneDNN's where available, kernels/onednn_linear.h; else LibTorch's).
  const auto [seconds, repeats] = time_product([&] { c = kernels::dense_mm(a, b); });
  const double n = static_cast<double>(o.size);
  nlohmann::ordered_json out;
  out["impl"] = "fitsum";
  out["benchmark"] = "matmul";
  out["size"] = o.size;
  out["threads"] = at::get_num_threads();
  out["blas_threads"] = util::blas_threads();
  out["blas"] = util::blas_description();
  out["host_allocator"] = util::host_allocator_description();
  out["device"] = device.str();
  out["products"] = kernels::onednn_available() && device.is_cpu() ? "oneDNN" : "LibTorch";
  out["repeats"] = repeats;
  out["gflops"] = 2.0 * n * n * n / seconds / 1e9;  // the denominator of MFU
  out["libtorch_repeats"] = libtorch_repeats;
  out["libtorch_gflops"] = 2.0 * n * n * n / libtorch_seconds / 1e9;
  std::cout << out.dump() << std::endl;
}

}  // namespace

void add_bench_matmul_command(CLI::App& bench) {
  auto matmul = std::make_shared<BenchMatmulOptions>();
  auto* m = bench.add_subcommand("matmul", "The fp32 matrix-product rate (n x n x n); prints one JSON line");
  m->add_option("--size", matmul->size, "n")->capture_default_str();
  m->add_option("--seconds", matmul->seconds, "measure for at least this long")->capture_default_str();
  m->add_option("--device", matmul->device, "cpu or cuda")->capture_default_str();
  add_thread_flags(*m, matmul->threads);
  m->callback([matmul]() { run_bench_matmul(*matmul); });
}

}  // namespace fitsum::cli
