// Implements include/fitsum/util/device.h.
#include "fitsum/util/device.h"

#include <stdexcept>

#include <torch/cuda.h>

namespace fitsum::util {

bool built_with_cuda() {
#ifdef FITSUM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

c10::Device parse_device(const std::string& name, bool allow_auto) {
  if (name == "cpu") return c10::Device(c10::kCPU);
  if (name == "cuda") {
    if (!built_with_cuda()) {
      throw std::invalid_argument(
          "--device cuda: this fitsum is built against a CPU-only LibTorch; build it against the LibTorch of a CUDA "
          "PyTorch (make build-cuda) or use --device cpu");
    }
    if (!torch::cuda::is_available()) {
      throw std::invalid_argument(
          "--device cuda: no CUDA device is visible (no GPU or no NVIDIA driver on this machine, or "
          "CUDA_VISIBLE_DEVICES hides them); use --device cpu");
    }
    return c10::Device(c10::kCUDA, 0);
  }
  if (name == "auto" && allow_auto) {
    return torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  }
  throw std::invalid_argument("--device '" + name + "' is not one of " +
                              (allow_auto ? "cpu, cuda, auto" : "cpu, cuda"));
}

}  // namespace fitsum::util
