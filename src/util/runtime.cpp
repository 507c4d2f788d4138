// Implements include/fitsum/util/runtime.h.
#include "fitsum/util/runtime.h"

#include <cstdlib>
#include <stdexcept>

#include <torch/cuda.h>
#ifdef FITSUM_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "fitsum/util/host_allocator.h"

namespace fitsum::util {

bool built_with_cuda() {
#ifdef FITSUM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_visible() { return built_with_cuda() && torch::cuda::is_available(); }

namespace {

c10::Device local_cuda_device(int local_rank) {
  const auto visible = static_cast<int>(torch::cuda::device_count());
  if (local_rank < 0 || local_rank >= visible) {
    throw std::invalid_argument("device cuda: this is process " + std::to_string(local_rank) +
                                " of its machine (LOCAL_RANK) but " + std::to_string(visible) +
                                " CUDA device(s) are visible: one process per device (--nproc_per_node at most the "
                                "GPUs), or device cpu");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

}  // namespace

c10::Device resolve_device(const std::string& name, int local_rank) {
  if (name == "cpu") return c10::Device(c10::kCPU);
  if (name == "cuda") {
    if (!built_with_cuda()) {
      throw std::invalid_argument(
          "device cuda: this fitsum is built against a CPU-only LibTorch; build it against the LibTorch of a CUDA "
          "PyTorch (make build-cuda) or use device cpu");
    }
    if (!torch::cuda::is_available()) {
      throw std::invalid_argument(
          "device cuda: no CUDA device is visible (no GPU or no NVIDIA driver on this machine, or "
          "CUDA_VISIBLE_DEVICES hides them); use device cpu");
    }
    return local_cuda_device(local_rank);
  }
  if (name == "auto") return torch::cuda::is_available() ? local_cuda_device(local_rank) : c10::Device(c10::kCPU);
  throw std::invalid_argument("device '" + name + "' is not one of cpu, cuda, auto");
}

Runtime setup_runtime(const RuntimeOptions& options) {
  Runtime runtime;
  runtime.threads = resolve_thread_settings(options.threads, options.local_processes);
  apply_thread_settings(runtime.threads);
  if (options.tune_host_allocator) tune_host_allocator_for_training();
  runtime.cuda_alloc_conf = options.cuda_alloc_conf;
  if (runtime.cuda_alloc_conf) {
    // LibTorch's caching allocator reads this once, when CUDA initialises: before anything touches the device.
    ::setenv("PYTORCH_CUDA_ALLOC_CONF", runtime.cuda_alloc_conf->text.c_str(), 1);
  } else if (const char* text = std::getenv("PYTORCH_CUDA_ALLOC_CONF"); text != nullptr && *text != '\0') {
    runtime.cuda_alloc_conf = parse_cuda_alloc_conf(text, "PYTORCH_CUDA_ALLOC_CONF");
  }
  runtime.device = resolve_device(options.device, options.local_rank);
#ifdef FITSUM_WITH_CUDA
  // Tensors made for "cuda" without an index, cuBLAS's handles and NCCL's communicator go to this device.
  if (runtime.device.is_cuda()) c10::cuda::set_device(runtime.device.index());
#endif
  // Measured only where the BLAS is not a known optimised one: on a machine busy with other processes OpenBLAS's
  // threads wait on each other and measure as slow as the reference BLAS, which a warning would wrongly blame.
  const auto blas = runtime.device.is_cpu() ? blas_description() : std::string();
  if (runtime.device.is_cpu() && !optimised_blas(blas)) {
    const double gflops = quick_matmul_gflops();
    if (reference_blas_suspected(blas, gflops)) {
      runtime.warnings.push_back("matrix products run at " + std::to_string(static_cast<int>(gflops)) +
                                 " GFLOP/s on this CPU (" + blas +
                                 "): LibTorch may be using Debian's reference BLAS; apt-get install "
                                 "libopenblas0-pthread makes them ~35x faster");
    }
  }
  return runtime;
}

}  // namespace fitsum::util
