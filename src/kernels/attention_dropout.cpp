// Implements include/fitsum/kernels/attention_dropout.h. The node's backward repeats what autograd runs for the
// composition d = dropout(probs); out = matmul(d, v) (PEGASUS-X's local attention: two products of slices of d, then
// their sum): for each product onednn_linear.cpp's DenseMatmulFunction backward, onednn_matmul(grad, v^T) and
// onednn_matmul(d^T, grad) with d recomputed; the slices' gradients placed into one tensor (narrow's backward), then
// the byte mask (dropout's backward).
#include "fitsum/kernels/attention_dropout.h"

#include <torch/torch.h>

#include "fitsum/kernels/dropout.h"
#include "fitsum/kernels/few_rows_linear.h"
#include "fitsum/kernels/onednn_linear.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool cpu_float(const at::Tensor& t) { return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat; }

bool node_applies(const at::Tensor& probs, const at::Tensor& v1, const at::Tensor& v2, double p, bool training,
                  bool byte_mask, bool recompute) {
  return recompute && training && byte_mask && at::GradMode::is_enabled() && p > 0.0 && p < 1.0 && onednn_available() && cpu_float(probs) && cpu_float(v2) &&
         (!v1.defined() || cpu_float(v1)) && probs.numel() > 0 && !util::autocast_enabled(c10::DeviceType::CPU);
}

// probs (..., S) -> the global tokens' columns, viewed as (B, H, N K, G), and the block's (B, H, N, K, K).
at::Tensor global_columns(const at::Tensor& d, std::int64_t g) {
  return d.narrow(-1, 0, g).view({d.size(0), d.size(1), d.size(2) * d.size(3), g});
}
at::Tensor block_columns(const at::Tensor& d, std::int64_t g) { return d.narrow(-1, g, d.size(-1) - g); }

// d @ v, or (v1 defined) global_local_context's two products of d's slices and their sum.
at::Tensor products(const at::Tensor& d, const at::Tensor& v1, const at::Tensor& v2) {
  if (!v1.defined()) return onednn_matmul(d, v2);
  const auto g = v1.size(-2);
  const auto from_global = onednn_matmul(global_columns(d, g), v1);  // (B, H, N K, hd)
  const auto from_block = onednn_matmul(block_columns(d, g), v2);    // (B, H, N, K, hd)
  return from_global + from_block.view(from_global.sizes());
}

// apply_byte_mask(grad, mask, scale) written over `grad` (one tensor of the probabilities' size less in backward):
// (x * scale) * mask element by element in float, the kernel's x * (scale * mask) for every x whose x * scale is
// finite, signs of zero included.
at::Tensor masked_in_place(at::Tensor grad, const at::Tensor& mask, float scale) {
  return grad.mul_(static_cast<double>(scale)).mul_(mask);
}

class DropoutMatmul : public torch::autograd::Function<DropoutMatmul> {
 public:
  // v1 undefined (an empty tensor through autograd): dropout_matmul; else global_local_context.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& probs, const at::Tensor& v1, const at::Tensor& v2,
                            double p) {
    auto dropped = byte_mask_dropout(probs, p);
    const auto first = v1.numel() > 0 ? v1 : at::Tensor();
    ctx->save_for_backward({probs, v1, v2});
    ctx->saved_data["mask"] = dropped.mask;
    ctx->saved_data["scale"] = static_cast<double>(dropped.scale);
    return products(dropped.output, first, v2);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& probs = saved[0];
    const auto v1 = saved[1].numel() > 0 ? saved[1] : at::Tensor();
    const auto& v2 = saved[2];
    const auto mask = ctx->saved_data["mask"].toTensor();
    const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    const auto& grad = grad_outputs[0];
    // One tensor of the probabilities' size at a time: the values' gradients from the recomputed d first (freed after
    // them), then the probabilities' gradient, masked in place.
    at::Tensor grad_probs, grad_v1, grad_v2;
    if (!v1.defined()) {
      if (ctx->needs_input_grad(2)) grad_v2 = onednn_matmul(apply_byte_mask(probs, mask, scale).transpose(-1, -2), grad);
      if (ctx->needs_input_grad(0)) grad_probs = masked_in_place(onednn_matmul(grad, v2.transpose(-1, -2)), mask, scale);
      return {grad_probs, at::Tensor(), grad_v2, at::Tensor()};
    }
    const auto g = v1.size(-2);
    // The block products' gradient: the sum's view of them undone, as view's backward (a reshape) does.
    const auto grad_block = grad.reshape({probs.size(0), probs.size(1), probs.size(2), probs.size(3), v2.size(-1)});
    if (ctx->needs_input_grad(1) || ctx->needs_input_grad(2)) {
      const auto d = apply_byte_mask(probs, mask, scale);  // the forward's dropped probabilities, bit for bit
      if (ctx->needs_input_grad(1)) grad_v1 = onednn_matmul(global_columns(d, g).transpose(-1, -2), grad);
      if (ctx->needs_input_grad(2)) grad_v2 = onednn_matmul(block_columns(d, g).transpose(-1, -2), grad_block);
    }
    if (ctx->needs_input_grad(0)) {
      auto grad_d = at::empty_like(probs, at::MemoryFormat::Contiguous);
      global_columns(grad_d, g).copy_(onednn_matmul(grad, v1.transpose(-1, -2)));
      block_columns(grad_d, g).copy_(onednn_matmul(grad_block, v2.transpose(-1, -2)));
      grad_probs = masked_in_place(grad_d, mask, scale);
    }
    return {grad_probs, grad_v1, grad_v2, at::Tensor()};
  }
};

}  // namespace

at::Tensor dropout_matmul(const at::Tensor& probs, const at::Tensor& v, double p, bool training, bool byte_mask,
                          bool recompute) {
  if (!node_applies(probs, at::Tensor(), v, p, training, byte_mask, recompute)) {
    return matmul(dropout(probs, p, training, byte_mask), v, training);
  }
  return DropoutMatmul::apply(probs, at::empty({0}, probs.options()), v, p);
}

at::Tensor global_local_context(const at::Tensor& probs, const at::Tensor& global_v, const at::Tensor& block_v,
                                double p, bool training, bool byte_mask, bool recompute) {
  const auto g = global_v.size(-2);
  if (!node_applies(probs, global_v, block_v, p, training, byte_mask, recompute)) {
    const auto d = dropout(probs, p, training, byte_mask);
    const auto from_global = matmul(global_columns(d, g), global_v, training);  // (B, H, N K, hd)
    const auto from_block = matmul(block_columns(d, g), block_v, training);     // (B, H, N, K, hd)
    return from_global + from_block.view(from_global.sizes());
  }
  return DropoutMatmul::apply(probs, global_v, block_v, p);
}

}  // namespace fitsum::kernels
