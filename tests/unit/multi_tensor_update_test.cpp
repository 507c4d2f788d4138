// The multi-tensor optimizer updates that CUDA parameters take (optim/multi_tensor_steps.h: at::_fused_adamw_ with
// LibTorch >= 2.4, torch's foreach formulation before; a foreach Adafactor), forced on CPU tensors, against fitsum's
// fused CPU kernels (and, for a 3-D parameter, the tensor-op formulas) over five clipped steps of an optimizer with
// two parameter groups; and the rule that picks the kernel by device.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fitsum/optim/multi_tensor_steps.h"
#include "fitsum/optim/optimizer_step.h"
#include "fitsum/optim/optimizers.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

using optim::UpdateKernel;
using optim::UpdatePath;

TEST(MultiTensorUpdate, KernelFollowsTheDevice) {
  const auto choose = optim::choose_update_kernel;
  const auto matrix = torch::randn({4, 3});
  EXPECT_EQ(choose(matrix, matrix, true, UpdatePath::by_device), UpdateKernel::fitsum_cpu);
  EXPECT_EQ(choose(matrix, matrix, true, UpdatePath::multi_tensor), UpdateKernel::multi_tensor);
  EXPECT_EQ(choose(matrix, matrix, false, UpdatePath::by_device), UpdateKernel::tensor_ops);
  EXPECT_EQ(choose(matrix, matrix, false, UpdatePath::multi_tensor), UpdateKernel::tensor_ops);
  // fitsum's CPU kernels take matrices and vectors; the multi-tensor ones any float32 shape.
  const auto cube = torch::randn({2, 3, 4});
  EXPECT_EQ(choose(cube, cube, true, UpdatePath::by_device), UpdateKernel::tensor_ops);
  EXPECT_EQ(choose(cube, cube, true, UpdatePath::multi_tensor), UpdateKernel::multi_tensor);
  // Other dtypes and non-contiguous tensors: the tensor ops.
  const auto half = matrix.to(torch::kBFloat16);
  EXPECT_EQ(choose(half, half, true, UpdatePath::by_device), UpdateKernel::tensor_ops);
  EXPECT_EQ(choose(half, half, true, UpdatePath::multi_tensor), UpdateKernel::tensor_ops);
  const auto transposed = torch::randn({3, 4}).t();
  EXPECT_EQ(choose(transposed, transposed, true, UpdatePath::multi_tensor), UpdateKernel::tensor_ops);
  // Off the CPU (a meta tensor stands in for a CUDA one): the multi-tensor kernels without being asked, unless the
  // gradient is on another device.
  const auto elsewhere = torch::empty({4, 3}, torch::TensorOptions().device(torch::kMeta));
  EXPECT_EQ(choose(elsewhere, elsewhere, true, UpdatePath::by_device), UpdateKernel::multi_tensor);
  EXPECT_EQ(choose(elsewhere, elsewhere, false, UpdatePath::by_device), UpdateKernel::tensor_ops);
  EXPECT_EQ(choose(elsewhere, matrix, true, UpdatePath::by_device), UpdateKernel::tensor_ops);
}

// make_optimizer's two groups keep their weight decay on every LibTorch (2.x's add_param_group gives a custom
// optimizer's groups the defaults), for both optimizers.
TEST(OptimizerGroups, KeepTheirOwnOptions) {
  struct Model : torch::nn::Module {
    Model() {
      linear = register_module("linear", torch::nn::Linear(3, 2));
      norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({2})));
    }
    torch::nn::Linear linear{nullptr};
    torch::nn::LayerNorm norm{nullptr};
  };
  const auto holder = std::make_shared<Model>();  // named_modules() needs the module in a shared_ptr
  auto& model = *holder;
  for (const auto type : {optim::OptimizerType::adamw_torch, optim::OptimizerType::adafactor}) {
    optim::OptimizerSettings settings;
    settings.type = type;
    settings.weight_decay = 0.25;
    settings.learning_rate = 3e-4;
    const auto optimizer = optim::make_optimizer(model, settings);
    ASSERT_EQ(optimizer->param_groups().size(), 2u);
    const auto decay_of = [&](std::size_t i) {
      const auto& options = optimizer->param_groups()[i].options();
      if (type == optim::OptimizerType::adafactor) {
        return static_cast<const optim::AdafactorOptions&>(options).weight_decay();
      }
      return static_cast<const optim::AdamWOptions&>(options).weight_decay();
    };
    EXPECT_EQ(decay_of(0), 0.25) << optim::to_string(type) << ": linear.weight's group";
    EXPECT_EQ(optimizer->param_groups()[0].params().size(), 1u);
    EXPECT_EQ(decay_of(1), 0.0) << optim::to_string(type) << ": biases and LayerNorm";
    EXPECT_EQ(optimizer->param_groups()[1].params().size(), 3u);
    EXPECT_EQ(optimizer->param_groups()[1].options().get_lr(), 3e-4);
  }
}

// Parameters of every kind the optimizers meet: matrices (factored in Adafactor; sizes not multiples of anything),
// vectors, a 3-D tensor (factored over its last two dimensions; fitsum's CPU kernels leave it to the tensor ops).
std::vector<torch::Tensor> initial_parameters() {
  torch::manual_seed(41);
  return {torch::randn({37, 29}), torch::randn({29}), torch::randn({5, 64}), torch::randn({3, 6, 10}),
          torch::randn({7})};
}

// The gradients of five steps; the fourth's norm is below max_grad_norm (no clipping), the others far above.
std::vector<std::vector<torch::Tensor>> gradients(const std::vector<torch::Tensor>& params) {
  torch::manual_seed(42);
  std::vector<std::vector<torch::Tensor>> steps;
  for (int step = 0; step < 5; ++step) {
    std::vector<torch::Tensor> grads;
    for (const auto& p : params) grads.push_back(torch::randn(p.sizes()) * (step == 3 ? 0.01 : 3.0));
    steps.push_back(grads);
  }
  return steps;
}

struct Trajectory {
  std::vector<torch::Tensor> params;
  std::map<std::string, torch::Tensor> state;
  std::vector<double> norms;
};

// Five steps of optimizer_step (clipping to norm 1, the update, zeroed gradients) from the same start and gradients;
// two groups, the matrices with weight decay and the rest without. `make` builds the optimizer from the groups.
template <typename Make>
Trajectory run(Make make) {
  Trajectory t;
  for (const auto& p : initial_parameters()) t.params.push_back(p.clone().requires_grad_(true));
  const auto& p = t.params;
  auto optimizer = make(std::vector<torch::Tensor>{p[0], p[2], p[3]}, std::vector<torch::Tensor>{p[1], p[4]});
  optim::NamedTensors named;
  for (std::size_t i = 0; i < p.size(); ++i) named.emplace_back("p" + std::to_string(i), p[i]);
  optim::UpdateOptions options;
  options.max_grad_norm = 1.0;
  for (const auto& grads : gradients(t.params)) {
    for (std::size_t i = 0; i < p.size(); ++i) t.params[i].mutable_grad() = grads[i].clone();
    t.norms.push_back(optim::optimizer_step(*optimizer, t.params, options).template item<double>());
    for (const auto& param : t.params) EXPECT_EQ(param.grad().abs().max().item<float>(), 0.0f) << "zeroed";
  }
  for (const auto& [name, tensor] : optim::export_optimizer_state(*optimizer, named)) t.state[name] = tensor;
  return t;
}

// Weights and state within 1e-6 of the reference's magnitude.
void expect_same_trajectory(const Trajectory& got, const Trajectory& want) {
  EXPECT_GT(want.norms[0], 1.0);  // clipped
  EXPECT_LT(want.norms[3], 1.0);  // not clipped
  for (std::size_t i = 0; i < want.params.size(); ++i) {
    EXPECT_CLOSE(got.params[i].detach(), want.params[i].detach(), relative(1e-6)) << "parameter " << i;
  }
  EXPECT_EQ(got.state.size(), want.state.size());
  for (const auto& [name, tensor] : want.state) {
    if (!got.state.count(name)) {
      ADD_FAILURE() << "no state " << name;
      continue;
    }
    EXPECT_CLOSE(got.state.at(name).to(torch::kDouble), tensor.to(torch::kDouble), relative(1e-6)) << name;
  }
  // The steps moved the weights: a trajectory that stood still would match any other that did.
  const auto start = initial_parameters();
  for (std::size_t i = 0; i < start.size(); ++i) {
    EXPECT_GT((want.params[i].detach() - start[i]).abs().max().item<double>(), 1e-3) << "parameter " << i;
  }
}

template <typename Options>
std::vector<torch::optim::OptimizerParamGroup> two_groups(const std::vector<torch::Tensor>& decayed,
                                                          const std::vector<torch::Tensor>& plain,
                                                          const Options& base, double weight_decay) {
  auto with_decay = std::make_unique<Options>(base);
  with_decay->weight_decay(weight_decay);
  auto without = std::make_unique<Options>(base);
  without->weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed, std::move(with_decay));
  groups.emplace_back(plain, std::move(without));
  return groups;
}

TEST(MultiTensorUpdate, AdamWEqualsTheCpuKernels) {
  const auto adamw = [](UpdatePath path) {
    return run([path](const std::vector<torch::Tensor>& decayed, const std::vector<torch::Tensor>& plain) {
      optim::AdamWOptions base(2e-2);
      base.beta1(0.8).beta2(0.95).eps(1e-6).update_path(path);
      return std::make_unique<optim::AdamW>(two_groups(decayed, plain, base, 0.1), base);
    });
  };
  // Within rounding, not bit for bit: at::_fused_adamw_'s CPU kernel (LibTorch >= 2.4) moves the first moment with
  // a lerp and vectorises with fused multiply-adds; torch's foreach formulation (1.13) divides by the bias
  // corrections in another order.
  expect_same_trajectory(adamw(UpdatePath::multi_tensor), adamw(UpdatePath::by_device));
}

TEST(MultiTensorUpdate, AdafactorEqualsTheCpuKernels) {
  const auto adafactor = [](UpdatePath path) {
    return run([path](const std::vector<torch::Tensor>& decayed, const std::vector<torch::Tensor>& plain) {
      optim::AdafactorOptions base(1e-2);
      base.update_path(path);
      return std::make_unique<optim::Adafactor>(two_groups(decayed, plain, base, 0.1), base);
    });
  };
  // fitsum's CPU kernels sum in double, the foreach means and norms in float32: equal within rounding, not in bits.
  expect_same_trajectory(adafactor(UpdatePath::multi_tensor), adafactor(UpdatePath::by_device));
}

}  // namespace
}  // namespace fitsum::test
