// Implements include/fitsum/model/activation_checkpoint.h with a custom autograd Function whose backward replays
// the block under the saved RNG state and back-propagates through the recomputed graph.
#include "fitsum/model/activation_checkpoint.h"

#include <algorithm>

#include <ATen/core/ivalue.h>
#include <torch/torch.h>

#include "fitsum/util/random_state.h"

namespace fitsum::model {

namespace {

struct BlockHolder : torch::CustomClassHolder {
  CheckpointedBlock block;
  at::Device device = at::kCPU;
  at::Tensor rng_state;  // the generator state right before the forward
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                c10::intrusive_ptr<BlockHolder> holder, at::TensorList input_list) {
    const TensorList inputs = input_list.vec();
    holder->rng_state = util::random_state(holder->device);
    // Custom functions run their forward without recording a graph: nothing inside the block is kept.
    auto outputs = holder->block(inputs);
    ctx->save_for_backward(inputs);
    ctx->saved_data["holder"] = c10::IValue::make_capsule(holder);
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto holder = ctx->saved_data["holder"].toCapsule();
    auto* block = static_cast<BlockHolder*>(holder.get());
    const auto saved = ctx->get_saved_variables();
    torch::autograd::variable_list detached;
    detached.reserve(saved.size());
    for (const auto& t : saved) {
      detached.push_back(t.defined() ? t.detach().requires_grad_(t.requires_grad()) : t);
    }
    torch::autograd::variable_list outputs;
    {
      // The recompute draws the dropout masks of the first pass; the run's random stream continues afterwards.
      util::RandomStateGuard keep(block->device);
      util::set_random_state(block->device, block->rng_state);
      torch::AutoGradMode enable(true);
      outputs = block->block(detached);
    }
    // Back-propagate through the recomputed block: parameter gradients accumulate into .grad as usual.
    torch::autograd::variable_list roots, grads;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!roots.empty()) {
      torch::autograd::backward(roots, grads);
    }
    torch::autograd::variable_list input_grads;
    for (const auto& t : detached) {
      input_grads.push_back(t.defined() && t.requires_grad() ? t.grad() : at::Tensor());
    }
    input_grads.insert(input_grads.begin(), at::Tensor());  // nothing for the holder argument
    return input_grads;
  }
};

}  // namespace

TensorList checkpoint(const CheckpointedBlock& block, const TensorList& inputs) {
  if (!torch::GradMode::is_enabled()) {
    return block(inputs);
  }
  auto holder = c10::make_intrusive<BlockHolder>();
  holder->block = block;
  for (const auto& t : inputs) {
    if (t.defined()) {
      holder->device = t.device();
      break;
    }
  }
  // When no input requires a gradient (frozen embeddings, a LoRA base) the function's outputs would not either and
  // its backward would never run, leaving the block's trainable tensors (adapters) without gradients: the first
  // floating input then stands in as one that does (HF's enable_input_require_grads), its gradient discarded.
  TensorList passed = inputs;
  const bool any_requires = std::any_of(inputs.begin(), inputs.end(),
                                        [](const at::Tensor& t) { return t.defined() && t.requires_grad(); });
  if (!any_requires) {
    for (auto& t : passed) {
      if (t.defined() && t.is_floating_point()) {
        t = t.detach().requires_grad_(true);
        break;
      }
    }
  }
  // Passed as a TensorList so that autograd sees each input as a variable of the function.
  return CheckpointFunction::apply(holder, at::TensorList(passed));
}

}  // namespace fitsum::model
