// The optimizer updates of parameters on a CUDA device (label `gpu`): they take the multi-tensor kernels
// (optim/multi_tensor_steps.h: at::_fused_adamw_, the foreach Adafactor) by themselves, and five clipped steps of
// both optimizers, from the same start and gradients, equal fitsum's fused CPU kernels' within 1e-5 of each tensor's
// magnitude. Without a CUDA device they skip; FITSUM_GPU_TESTS_ON_CPU=1 runs them on the CPU (both sides then take
// the CPU kernels).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "fitsum/optim/multi_tensor_steps.h"
#include "fitsum/optim/optimizer_step.h"
#include "fitsum/optim/optimizers.h"
#include "gpu_device.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

// Five steps of optimizer_step (clipped to norm 1) of `type` on parameters moved to `device`; the parameters after.
std::vector<torch::Tensor> five_steps(optim::OptimizerType type, const torch::Device& device) {
  torch::manual_seed(51);
  const std::vector<std::vector<std::int64_t>> shapes = {{37, 29}, {29}, {5, 64}, {3, 6, 10}};
  std::vector<torch::Tensor> params;
  for (const auto& shape : shapes) params.push_back(torch::randn(shape).to(device).requires_grad_(true));
  std::vector<torch::optim::OptimizerParamGroup> groups;
  std::unique_ptr<torch::optim::OptimizerOptions> with_decay;
  if (type == optim::OptimizerType::adafactor) {
    with_decay = std::make_unique<optim::AdafactorOptions>(optim::AdafactorOptions(1e-2).weight_decay(0.1));
  } else {
    with_decay = std::make_unique<optim::AdamWOptions>(optim::AdamWOptions(2e-2).weight_decay(0.1));
  }
  groups.emplace_back(params, std::move(with_decay));
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (type == optim::OptimizerType::adafactor) {
    optimizer = std::make_unique<optim::Adafactor>(std::move(groups), optim::AdafactorOptions(1e-2));
  } else {
    optimizer = std::make_unique<optim::AdamW>(std::move(groups), optim::AdamWOptions(2e-2));
  }
  optim::UpdateOptions options;
  options.max_grad_norm = 1.0;
  for (int step = 0; step < 5; ++step) {
    for (auto& p : params) p.mutable_grad() = (torch::randn(p.sizes()) * (step == 3 ? 0.01 : 3.0)).to(device);
    optim::optimizer_step(*optimizer, params, options);
  }
  return params;
}

TEST(CudaOptimizers, MultiTensorUpdatesEqualTheCpuKernels) {
  const auto device = gpu_test_device();
  if (!device) GTEST_SKIP() << "no CUDA device (FITSUM_GPU_TESTS_ON_CPU=1 runs these on the CPU)";
  const auto probe = torch::zeros({4, 3}, torch::TensorOptions().device(*device));
  EXPECT_EQ(optim::choose_update_kernel(probe, probe, true, optim::UpdatePath::by_device),
            device->is_cpu() ? optim::UpdateKernel::fitsum_cpu : optim::UpdateKernel::multi_tensor);
  for (const auto type : {optim::OptimizerType::adamw_torch, optim::OptimizerType::adafactor}) {
    const auto on_device = five_steps(type, *device);
    const auto on_cpu = five_steps(type, torch::kCPU);
    for (std::size_t i = 0; i < on_cpu.size(); ++i) {
      EXPECT_CLOSE(on_device[i].detach().cpu(), on_cpu[i].detach(), relative(1e-5))
          << optim::to_string(type) << " parameter " << i;
    }
  }
}

}  // namespace
}  // namespace fitsum::test
