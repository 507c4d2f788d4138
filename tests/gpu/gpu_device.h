// The device the gpu-labelled tests run on: CUDA when there is one; with FITSUM_GPU_TESTS_ON_CPU=1 the CPU instead,
// to check the tests themselves on a machine without a GPU; otherwise none, and the tests skip.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

#include <torch/cuda.h>
#include <torch/torch.h>

namespace fitsum::test {

inline std::optional<torch::Device> gpu_test_device() {
  if (torch::cuda::is_available()) return torch::Device(torch::kCUDA);
  const char* on_cpu = std::getenv("FITSUM_GPU_TESTS_ON_CPU");
  if (on_cpu != nullptr && std::string(on_cpu) == "1") return torch::Device(torch::kCPU);
  return std::nullopt;
}

}  // namespace fitsum::test
