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

// The gradient of activate(u) for its output's gradient `grad`, as LibTorch's autograd formulas compute it.
at::Tensor activation_backward(const at::Tensor& grad, const at::Tensor& u, const at::Tensor& activated,
                               Activation activation) {
  switch (activation) {
    case Activation::relu:
      return at::threshold_backward(grad, activated, 0);  // relu saves its result
    case Activation::gelu:
      return at::gelu_backward(grad, u);
    case Activation::gelu_new:
      return at::gelu_backward(grad, u, "tanh");
    case Activation::silu:
      return at::silu_backward(grad, u);
  }
  return grad;
}

class ActivationDropoutLinear : public torch::autograd::Function<ActivationDropoutLinear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& u, const at::Tensor& weight, const at::Tensor& bias,
                            std::int64_t activation, double p) {
    auto h = activate(u, static_cast<Activation>(activation));
    at::Tensor mask;
    float scale = 1.0f;
    if (p > 0.0) {
      auto dropped = byte_mask_dropout(h, p);
      h = std::move(dropped.output);
      mask = std::move(dropped.mask);
      scale = dropped.scale;
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
    const auto activated = activate(u, activation);
    const auto h = mask.defined() ? apply_byte_mask(activated, mask, scale) : activated.contiguous();
    const auto ffn = h.size(-1);
    const auto rows = h.numel() / ffn;
    const auto grad = grad_outputs[0].reshape({rows, weight.size(0)});
    const auto h2 = h.reshape({rows, ffn});
    auto grad_weight = dense_mm(grad.t(), h2);  // mm_mat2_backward of weight.t(), transposed back
    auto grad_bias = has_bias ? grad.sum(0) : at::Tensor();
    auto grad_h = dense_mm(grad, weight).view(u.sizes());  // mm_mat1_backward
    if (mask.defined()) grad_h = apply_byte_mask(grad_h, mask, scale);
    auto grad_u = activation_backward(grad_h, u, activated, activation);
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
    auto h = kernels::dropout(activate(u, activation), p, training, byte_mask);
    u.reset();  // fc1's output is not kept beside fc2's (unless autograd keeps it)
    return kernels::linear(h, weight, bias, training);
  }
  return ActivationDropoutLinear::apply(u, weight, bias.defined() ? bias : at::empty({0}, weight.options()),
                                        static_cast<std::int64_t>(activation), active_p);
}

}  // namespace fitsum::kernels
