// Implements include/fitsum/util/threads.h.
#include "fitsum/util/threads.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/mm.h>

namespace fitsum::util {

namespace {

// OpenBLAS's C entry points, looked up in the process (libblas.so.3 is already loaded by LibTorch).
template <typename Fn>
Fn openblas_symbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, name));
}

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

// The "BLAS_INFO=..." field of LibTorch's build configuration (at::show_config(): "mkl", "open", "generic", ...),
// or "".
std::string libtorch_blas_info(const std::string& config) {
  const std::string key = "BLAS_INFO=";
  const auto begin = config.find(key);
  if (begin == std::string::npos) return "";
  const auto value = begin + key.size();
  return config.substr(value, config.find_first_of(", \n", value) - value);
}

BlasThreading detect_blas_threading() {
  // OpenBLAS's openblas_get_parallel: 0 sequential, 1 pthreads, 2 OpenMP.
  if (auto parallel = openblas_symbol<int (*)()>("openblas_get_parallel")) {
    switch (parallel()) {
      case 0:
        return BlasThreading::single;
      case 2:
        return BlasThreading::intra_op_pool;
      default:
        return BlasThreading::own_pool;
    }
  }
  if (openblas_symbol<void (*)(int)>("openblas_set_num_threads") != nullptr) return BlasThreading::own_pool;
  // MKL inside LibTorch: ATen's set_num_threads sets MKL's threads too.
  if (libtorch_blas_info(at::show_config()) == "mkl") return BlasThreading::intra_op_pool;
  return BlasThreading::unknown;
}

}  // namespace

BlasThreading blas_threading() {
  // Looked up once: the BLAS is linked into the process and does not change. blas_threads() below is asked at every
  // few-rows product of a decoding step (thousands per generate() call), which should not each search every loaded
  // library's symbols twice (or, with MKL, format LibTorch's whole build configuration).
  static const BlasThreading threading = detect_blas_threading();
  return threading;
}

ThreadSettings default_thread_settings(int processes) {
  const int cores = std::max(1, hardware_threads() / std::max(1, processes));
  ThreadSettings s;
  if (blas_threading() == BlasThreading::own_pool) {
    s.intra_op = 1;
    s.blas = cores;
  } else {
    s.intra_op = cores;
    s.blas = 0;  // nothing to set: the products run on the intra-op threads (or on one)
  }
  s.update = 1;
  return s;
}

ThreadSettings resolve_thread_settings(const ThreadSettings& requested, int processes) {
  // 0 is "fitsum's default"; a negative count was silently ignored, and 100,000 threads never finished starting.
  const auto check = [](int threads, const char* field) {
    if (threads < 0 || threads > kMaxThreads) {
      throw std::invalid_argument(std::string(field) + " must be between 0 (fitsum's default) and " +
                                  std::to_string(kMaxThreads) + ", got " + std::to_string(threads));
    }
  };
  check(requested.intra_op, "num_threads");
  check(requested.blas, "blas_threads");
  check(requested.update, "update_threads");
  auto s = default_thread_settings(processes);
  if (requested.intra_op > 0) s.intra_op = requested.intra_op;
  if (requested.blas > 0) s.blas = requested.blas;
  if (requested.update > 0) s.update = requested.update;
  return s;
}

void apply_thread_settings(const ThreadSettings& settings) {
  if (settings.intra_op > 0) at::set_num_threads(settings.intra_op);
  if (settings.blas > 0) {
    if (auto set = openblas_symbol<void (*)(int)>("openblas_set_num_threads")) set(settings.blas);
  }
}

IntraOpThreadsGuard::IntraOpThreadsGuard(int threads) : previous_(at::get_num_threads()) {
  if (threads > 0 && threads != previous_) at::set_num_threads(threads);
}

IntraOpThreadsGuard::~IntraOpThreadsGuard() {
  if (at::get_num_threads() != previous_) at::set_num_threads(previous_);
}

int blas_threads() {
  switch (blas_threading()) {
    case BlasThreading::own_pool: {
      static const auto get = openblas_symbol<int (*)()>("openblas_get_num_threads");
      return get != nullptr ? get() : 0;
    }
    case BlasThreading::intra_op_pool:
      return at::get_num_threads();
    case BlasThreading::single:
      return 1;
    case BlasThreading::unknown:
      break;
  }
  return 0;
}

std::string blas_description() {
  if (auto config = openblas_symbol<char* (*)()>("openblas_get_config"))
    return config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  // PyPI's LibTorch links MKL statically; its build configuration names it on a line of its own.
  const auto config = at::show_config();
  const auto mkl = config.find("Math Kernel Library");
  if (mkl != std::string::npos) {
    const auto line_begin = config.rfind('\n', mkl) + 1;  // npos + 1 == 0 on the first line
    auto line = config.substr(line_begin, config.find('\n', mkl) - line_begin);
    line.erase(0, line.find_first_not_of(" -"));
    return line.substr(0, line.find(" for "));  // "... Version 2024.2-Product Build 20240605"
  }
  if (const auto info = libtorch_blas_info(config); !info.empty()) return "BLAS_INFO=" + info;
  return "unknown BLAS";
}

double quick_matmul_gflops(std::int64_t n) {
  // Constant operands: the rate does not depend on the values, and the global random stream stays untouched.
  const auto a = at::full({n, n}, 0.5f);
  const auto b = at::full({n, n}, 0.25f);
  auto c = at::empty({n, n});
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {  // the first one also wakes the BLAS threads
    const auto start = std::chrono::steady_clock::now();
    at::mm_out(c, a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double nd = static_cast<double>(n);
  return 2.0 * nd * nd * nd / std::max(best, 1e-9) / 1e9;
}

bool optimised_blas(const std::string& description) {
  return description.rfind("OpenBLAS", 0) == 0 || description.find("Math Kernel Library") != std::string::npos;
}

bool reference_blas_suspected(const std::string& description, double gflops) {
  return !optimised_blas(description) && gflops < 20.0;
}

}  // namespace fitsum::util
