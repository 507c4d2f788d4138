// Implements include/fitsum/kernels/feed_forward.h. fc2 is torch::nn::Linear's forward, torch::nn::functional::linear:
// for a (B, T, ffn) input LibTorch's C++ frontend multiplies (matmul, folded into one mm) and then adds the bias in
// place (for a 2-D input, addmm). The node's backward repeats, for the same tensors, what autograd runs for that:
// mm_mat1_backward / mm_mat2_backward for a row-major input and a transposed weight, the bias's gradient summed over
// the rows, then the byte mask and the activation's own backward.
#include "fitsum/kernels/feed_forward.h"

#include <torch/torch.h>

#include "fitsum/kernels/dropout.h"
#include "fitsum/kernels/few_rows_linear.h"
#include "fitsum/kernels/onednn_linear.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::kernels {

at::Tensor activate(const at::Tensor& x, Activation activation) {
  switch (activation) {
    case Activation::relu:
      return torch::relu(x);
    case Activation::gelu:
      return torch::gelu(x);
    case Activation::gelu_new:
      return torch::gelu(x, "tanh");
    case Activation::silu:
      return torch::silu(x);
  }
  return x;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The gradient of activate(u) for its output's gradient `grad`, as LibTorch's autograd formulas compute it, written
// over `grad` (the elementwise kernels read each element before writing it). relu's formula reads its saved result,
// relu(u) > 0 exactly where u > 0 (NaN neither).
void activation_backward_(at::Tensor& grad, const at::Tensor& u, Activation activation) {
  switch (activation) {
    case Activation::relu:
      at::threshold_backward_out(grad, grad, u, 0);
      return;
    case Activation::gelu:
      at::gelu_backward_out(grad, grad, u);
      return;
    case Activation::gelu_new:
      at::gelu_backward_out(grad, grad, u, "tanh");
      return;
    case Activation::silu:
      at::silu_backward_out(grad, grad, u);
      return;
  }
}

class ActivationDropoutLinear : public torch::autograd::Function<ActivationDropoutLinear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& u, const at::Tensor& weight, const at::Tensor& bias,
                            std::int64_t activation, double p) {
    // The dropout written over the activation's output (one tensor of u's size less at the forward's peak).
    auto h = activate(u, static_cast<Activation>(activation)).contiguous();
    at::Tensor mask;
    float scale = 1.0f;
    if (p > 0.0) {
      auto drawn = draw_byte_mask(h.sizes(), p);
      apply_byte_mask_(h, drawn.mask, drawn.scale);
      mask = std::move(drawn.mask);
      scale = drawn.scale;
    }
    ctx->save_for_backward({u, weight});
    ctx->saved_data["mask"] = mask;
    ctx->saved_data["scale"] = static_cast<double>(scale);
    ctx->saved_data["activation"] = activation;
    const bool has_bias = bias.numel() > 0;  // an empty tensor stands for none: apply() takes no undefined input
    ctx->saved_data["bias"] = has_bias;
    return dense_linear(h, weight, has_bias ? bias : at::Tensor());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& u = saved[0];
    const auto& weight = saved[1];
    const auto mask = ctx->saved_data["mask"].toTensor();
    const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    const auto activation = static_cast<Activation>(ctx->saved_data["activation"].toInt());
    const bool has_bias = ctx->saved_data["bias"].toBool();
    // One tensor of u's size beside u at a time: fc2's input, recomputed and masked in place, until the weight's
    // gradient is taken; then the input's gradient, masked and taken through the activation in place.
    auto h = activate(u, activation).contiguous();
    if (mask.defined()) apply_byte_mask_(h, mask, scale);
    const auto ffn = h.size(-1);
    const auto rows = h.numel() / ffn;
    const auto grad = grad_outputs[0].reshape({rows, weight.size(0)});
    auto grad_weight = dense_mm(grad.t(), h.reshape({rows, ffn}));  // mm_mat2_backward of weight.t(), transposed back
    h = at::Tensor();
    auto grad_bias = has_bias ? grad.sum(0) : at::Tensor();
    auto grad_u = dense_mm(grad, weight).view(u.sizes());  // mm_mat1_backward
    if (mask.defined()) apply_byte_mask_(grad_u, mask, scale);
    activation_backward_(grad_u, u, activation);
    return {grad_u, grad_weight, grad_bias, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor activation_dropout_linear(at::Tensor u, Activation activation, double p, bool training, bool byte_mask,
                                     const at::Tensor& weight, const at::Tensor& bias, bool recompute) {
  const double active_p = training ? p : 0.0;
  const bool fused = recompute && u.device().is_cpu() && u.scalar_type() == at::kFloat &&
                     weight.scalar_type() == at::kFloat && !util::autocast_enabled(c10::DeviceType::CPU) &&
                     u.dim() >= 2 && u.is_contiguous() && u.numel() > 0 && active_p < 1.0 &&
                     (active_p == 0.0 || byte_mask) && at::GradMode::is_enabled() &&
                     (u.requires_grad() || weight.requires_grad());
  if (!fused) {
    auto h = activate(u, activation);
    u.reset();  // fc1's output is not kept beside fc2's (unless autograd keeps it)
    h = kernels::dropout_over(std::move(h), p, training, byte_mask);  // in place without gradients
    return kernels::linear(h, weight, bias, training);
  }
  return ActivationDropoutLinear::apply(u, weight, bias.defined() ? bias : at::empty({0}, weight.options()),
                                        static_cast<std::int64_t>(activation), active_p);
}

}  // namespace fitsum::kernels
