// Implements include/fitsum/util/runtime.h.
#include "fitsum/util/runtime.h"

#include <cstdlib>
#include <stdexcept>

#include <torch/cuda.h>

#include "fitsum/util/host_allocator.h"

namespace fitsum::util {

c10::Device resolve_device(const std::string& name) {
  if (name == "cpu") return c10::Device(c10::kCPU);
  if (name == "cuda") {
    if (!torch::cuda::is_available()) {
      throw std::invalid_argument("device cuda: no CUDA device is visible to this LibTorch build; use cpu");
    }
    return c10::Device(c10::kCUDA);
  }
  if (name == "auto") return torch::cuda::is_available() ? c10::Device(c10::kCUDA) : c10::Device(c10::kCPU);
  throw std::invalid_argument("device '" + name + "' is not one of cpu, cuda, auto");
}

Runtime setup_runtime(const RuntimeOptions& options) {
  Runtime runtime;
  runtime.threads = resolve_thread_settings(options.threads);
  apply_thread_settings(runtime.threads);
  if (options.tune_host_allocator) tune_host_allocator_for_training();
  if (!options.cuda_alloc_conf.empty()) {
    // LibTorch's caching allocator reads this once, when CUDA initialises: before anything touches the device.
    ::setenv("PYTORCH_CUDA_ALLOC_CONF", options.cuda_alloc_conf.c_str(), 1);
  }
  runtime.device = resolve_device(options.device);
  if (runtime.device.is_cpu()) {
    const double gflops = quick_matmul_gflops();
    if (gflops < 20.0) {
      runtime.warnings.push_back("matrix products run at " + std::to_string(static_cast<int>(gflops)) +
                                 " GFLOP/s on this CPU (" + blas_description() +
                                 "): LibTorch may be using Debian's reference BLAS; apt-get install "
                                 "libopenblas0-pthread makes them ~35x faster");
    }
  }
  return runtime;
}

}  // namespace fitsum::util
