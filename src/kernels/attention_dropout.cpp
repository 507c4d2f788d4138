// Implements include/fitsum/kernels/attention_dropout.h. The node's backward repeats what autograd runs for the
// composition scores = q @ k_t (+ the local attention's second product, concatenated); scores += mask;
// probs = softmax(scores); d = dropout(probs); out = d @ v (the local attention: two products of slices of d, then
// their sum): for each product onednn_linear.cpp's DenseMatmulFunction backward, onednn_matmul(grad, b^T) and
// onednn_matmul(a^T, grad), with probs and d recomputed; the slices' gradients placed into one tensor (narrow's
// backward), the byte mask (dropout's backward), softmax's backward kernel, and the concatenation's and views'
// backward (views of the scores' gradient).
#include "fitsum/kernels/attention_dropout.h"

#include <array>
#include <vector>

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

// Whether the head-by-head path applies (with autograd's gradient mode on, as the node): training with the byte-mask
// dropout, float32 on the CPU with oneDNN and no autocast, every operand but the mask (broadcast there) of the
// queries' batch and heads.
bool by_heads_applies(std::initializer_list<const at::Tensor*> operands, const at::Tensor& mask, double p,
                      bool training, bool byte_mask, bool recompute) {
  if (!(recompute && training && byte_mask && p > 0.0 && p < 1.0 && onednn_available() &&
        !util::autocast_enabled(c10::DeviceType::CPU) && cpu_float(mask) && mask.dim() >= 2)) {
    return false;
  }
  const auto& first = **operands.begin();
  for (const auto* t : operands) {
    if (!cpu_float(*t) || t->numel() == 0 || t->dim() < 4 || t->size(0) != first.size(0) ||
        t->size(1) != first.size(1)) {
      return false;
    }
  }
  return (mask.size(0) == 1 || mask.size(0) == first.size(0)) && (mask.size(1) == 1 || mask.size(1) == first.size(1));
}

// scores + mask, in place when the dtypes agree (neither the product's nor the concatenation's backward reads the
// scores; one tensor of the scores' size less at the forward's peak); under autocast the float mask promotes the
// bfloat16 scores, as HF's sum does.
at::Tensor add_mask(at::Tensor scores, const at::Tensor& mask) {
  return scores.scalar_type() == mask.scalar_type() ? scores.add_(mask) : scores + mask;
}

// d's global tokens' columns, viewed as (B, H, N K, G), and its block's (B, H, N, K, K).
at::Tensor global_columns(const at::Tensor& d, std::int64_t g) {
  return d.narrow(-1, 0, g).view({d.size(0), d.size(1), d.size(2) * d.size(3), g});
}
at::Tensor block_columns(const at::Tensor& d, std::int64_t g) { return d.narrow(-1, g, d.size(-1) - g); }

// The scores' operands: the global attention's q1 @ k1_t, or (q2 defined) the local attention's two products.
struct ScoreOperands {
  at::Tensor q1, k1_t, q2, k2_t, mask;
  bool local() const { return q2.defined(); }
};

// softmax(scores + mask), as the composition computes it (its products are DenseMatmulFunction's forward).
at::Tensor probabilities(const ScoreOperands& s) {
  at::Tensor scores;
  if (!s.local()) {
    scores = onednn_matmul(s.q1, s.k1_t);
  } else {
    const auto& q = s.q2;  // (B, H, N, K, hd)
    const auto to_global =
        onednn_matmul(s.q1, s.k1_t).view({q.size(0), q.size(1), q.size(2), q.size(3), s.k1_t.size(-1)});
    scores = at::cat({to_global, onednn_matmul(q, s.k2_t)}, -1);
  }
  return at::softmax(scores.add_(s.mask), -1);
}

// d @ v2, or (v1 defined) the local attention's two products of d's slices and their sum.
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

at::Tensor defined_or_none(const at::Tensor& t) { return t.numel() > 0 ? t : at::Tensor(); }

// A head's (or, for a batch of more than one, a batch row's head's) slice of an operand: dimensions 0 and 1 are the
// batch and the heads, where an operand of size 1 there (the masks) is broadcast and taken whole.
at::Tensor head_slice(const at::Tensor& t, std::int64_t b, std::int64_t h) {
  if (!t.defined()) return t;
  const auto row = t.size(0) > 1 ? t.narrow(0, b, 1) : t;
  return row.size(1) > 1 ? row.narrow(1, h, 1) : row;
}

ScoreOperands head_slice(const ScoreOperands& s, std::int64_t b, std::int64_t h) {
  return {head_slice(s.q1, b, h), head_slice(s.k1_t, b, h), head_slice(s.q2, b, h), head_slice(s.k2_t, b, h),
          head_slice(s.mask, b, h)};
}

// The probabilities' sizes: (B, H, T, S), or the local attention's (B, H, N, K, G + K).
std::vector<std::int64_t> probability_sizes(const ScoreOperands& s) {
  if (!s.local()) return {s.q1.size(0), s.q1.size(1), s.q1.size(2), s.k1_t.size(-1)};
  return {s.q2.size(0), s.q2.size(1), s.q2.size(2), s.q2.size(3), s.k1_t.size(-1) + s.k2_t.size(-1)};
}

// The context, computed head by head: one head's probabilities (its scores, their masked sum, the softmax, the
// dropped copy) at a time instead of every head's at once. The heads are independent, so every element is the
// composition's bit for bit, with the byte mask drawn whole beforehand (kernels::draw_byte_mask).
at::Tensor context_by_heads(const ScoreOperands& s, const at::Tensor& v1, const at::Tensor& v2, const at::Tensor& mask,
                            float scale) {
  const auto batch = s.q1.size(0), heads = s.q1.size(1);
  auto out = at::empty({batch, heads, s.q1.size(2), v2.size(-1)}, v2.options());
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const auto d = apply_byte_mask(probabilities(head_slice(s, b, h)), head_slice(mask, b, h), scale);
      head_slice(out, b, h).copy_(products(d, head_slice(v1, b, h), head_slice(v2, b, h)));
    }
  }
  return out;
}

// The gradients of one head's operands (q1, k1_t, q2, k2_t, mask, v1, v2) from its context's gradient.
variable_list head_gradients(const std::array<bool, 7>& needs, const ScoreOperands& s, const at::Tensor& v1,
                             const at::Tensor& v2, const at::Tensor& mask, float scale, const at::Tensor& grad) {
  variable_list out(7);
  auto probs = probabilities(s);  // the forward's, bit for bit
  // One more tensor of the probabilities' size at a time: the values' gradients from the recomputed d first (freed
  // after them), then the probabilities' gradient, masked in place, then the scores' gradient over it.
  at::Tensor grad_d;
  if (!s.local()) {
    if (needs[6]) out[6] = onednn_matmul(apply_byte_mask(probs, mask, scale).transpose(-1, -2), grad);
    grad_d = onednn_matmul(grad, v2.transpose(-1, -2));
  } else {
    const auto g = v1.size(-2);
    // The block products' gradient: the sum's view of them undone, as view's backward (a reshape) does.
    const auto grad_block = grad.reshape({probs.size(0), probs.size(1), probs.size(2), probs.size(3), v2.size(-1)});
    if (needs[5] || needs[6]) {
      const auto d = apply_byte_mask(probs, mask, scale);
      if (needs[5]) out[5] = onednn_matmul(global_columns(d, g).transpose(-1, -2), grad);
      if (needs[6]) out[6] = onednn_matmul(block_columns(d, g).transpose(-1, -2), grad_block);
    }
    grad_d = at::empty_like(probs, at::MemoryFormat::Contiguous);
    global_columns(grad_d, g).copy_(onednn_matmul(grad, v1.transpose(-1, -2)));
    block_columns(grad_d, g).copy_(onednn_matmul(grad_block, v2.transpose(-1, -2)));
  }
  auto grad_scores = masked_in_place(grad_d, mask, scale);
  // softmax's backward kernel, each row's output written after the row's sum over the gradient is read.
  at::_softmax_backward_data_out(grad_scores, grad_scores, probs, -1, at::kFloat);
  probs = at::Tensor();
  const auto product = [&](std::size_t a, const at::Tensor& q, const at::Tensor& k_t, const at::Tensor& g) {
    if (needs[a]) out[a] = onednn_matmul(g, k_t.transpose(-1, -2));  // DenseMatmulFunction's backward
    if (needs[a + 1]) out[a + 1] = onednn_matmul(q.transpose(-1, -2), g);
  };
  if (!s.local()) {
    product(0, s.q1, s.k1_t, grad_scores);
  } else {
    const auto g = s.k1_t.size(-1);
    // The concatenation's backward: views of the scores' gradient; the first product's view undone (a reshape).
    product(0, s.q1, s.k1_t, grad_scores.narrow(-1, 0, g).reshape({s.q1.size(0), s.q1.size(1), s.q1.size(2), g}));
    product(2, s.q2, s.k2_t, block_columns(grad_scores, g));
  }
  return out;
}

// Inputs: q1, k1_t, q2, k2_t, mask, v1, v2 (q2, k2_t and v1 empty for the global attention: d @ v2), p. Forward and
// backward run head by head (context_by_heads, head_gradients), each head's gradients written into its slice of
// the operands' gradients.
class AttentionContext : public torch::autograd::Function<AttentionContext> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q1, const at::Tensor& k1_t, const at::Tensor& q2,
                            const at::Tensor& k2_t, const at::Tensor& mask, const at::Tensor& v1, const at::Tensor& v2,
                            double p) {
    const ScoreOperands s{q1, k1_t, defined_or_none(q2), defined_or_none(k2_t), mask};
    const auto drawn = draw_byte_mask(probability_sizes(s), p);
    ctx->save_for_backward({q1, k1_t, q2, k2_t, mask, v1, v2});
    ctx->saved_data["mask"] = drawn.mask;
    ctx->saved_data["scale"] = static_cast<double>(drawn.scale);
    return context_by_heads(s, defined_or_none(v1), v2, drawn.mask, drawn.scale);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const ScoreOperands s{saved[0], saved[1], defined_or_none(saved[2]), defined_or_none(saved[3]), saved[4]};
    const auto v1 = defined_or_none(saved[5]);
    const auto& v2 = saved[6];
    const auto mask = ctx->saved_data["mask"].toTensor();
    const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    std::array<bool, 7> needs{};
    variable_list out(8);
    for (std::size_t i = 0; i < needs.size(); ++i) {
      needs[i] = i != 4 && ctx->needs_input_grad(i) && saved[i].numel() > 0;  // the additive mask takes none
      if (needs[i]) out[i] = at::empty(saved[i].sizes(), saved[i].options());
    }
    for (std::int64_t b = 0; b < s.q1.size(0); ++b) {
      for (std::int64_t h = 0; h < s.q1.size(1); ++h) {
        const auto head = head_gradients(needs, head_slice(s, b, h), head_slice(v1, b, h), head_slice(v2, b, h),
                                         head_slice(mask, b, h), scale, head_slice(grad_outputs[0], b, h));
        for (std::size_t i = 0; i < needs.size(); ++i) {
          if (needs[i]) head_slice(out[i], b, h).copy_(head[i]);
        }
      }
    }
    return out;
  }
};

at::Tensor none(const at::Tensor& like) { return at::empty({0}, like.options()); }

// The head-by-head path: the node with gradients; without them (a checkpointed layer's first pass) its forward alone,
// with the mask the node would draw.
at::Tensor by_heads(const ScoreOperands& s, const at::Tensor& v1, const at::Tensor& v2, double p) {
  if (at::GradMode::is_enabled()) {
    const auto or_none = [&](const at::Tensor& t) { return t.defined() ? t : none(v2); };
    return AttentionContext::apply(s.q1, s.k1_t, or_none(s.q2), or_none(s.k2_t), s.mask, or_none(v1), v2, p);
  }
  const auto drawn = draw_byte_mask(probability_sizes(s), p);
  return context_by_heads(s, v1, v2, drawn.mask, drawn.scale);
}

}  // namespace

at::Tensor attention_context(const at::Tensor& q, const at::Tensor& k_t, const at::Tensor& mask, const at::Tensor& v,
                             double p, bool training, bool byte_mask, bool recompute) {
  if (!by_heads_applies({&q, &k_t, &v}, mask, p, training, byte_mask, recompute)) {
    const auto probs = torch::softmax(add_mask(matmul(q, k_t, training), mask), -1);
    return matmul(dropout(probs, p, training, byte_mask), v, training);
  }
  return by_heads({q, k_t, at::Tensor(), at::Tensor(), mask}, at::Tensor(), v, p);
}

at::Tensor global_local_context(const at::Tensor& local_q, const at::Tensor& global_k_t, const at::Tensor& block_q,
                                const at::Tensor& block_k_t, const at::Tensor& block_mask, const at::Tensor& global_v,
                                const at::Tensor& block_v, double p, bool training, bool byte_mask, bool recompute) {
  if (!by_heads_applies({&local_q, &global_k_t, &block_q, &block_k_t, &global_v, &block_v}, block_mask, p, training,
                        byte_mask, recompute)) {
    const auto g = global_k_t.size(-1);
    const auto to_global = matmul(local_q, global_k_t, training)
                               .view({block_q.size(0), block_q.size(1), block_q.size(2), block_q.size(3), g});
    const auto to_block = matmul(block_q, block_k_t, training);
    const auto probs = torch::softmax(add_mask(torch::cat({to_global, to_block}, -1), block_mask), -1);
    const auto d = dropout(probs, p, training, byte_mask);
    const auto from_global = matmul(global_columns(d, g), global_v, training);  // (B, H, N K, hd)
    const auto from_block = matmul(block_columns(d, g), block_v, training);     // (B, H, N, K, hd)
    return from_global + from_block.view(from_global.sizes());
  }
  return by_heads({local_q, global_k_t, block_q, block_k_t, block_mask}, global_v, block_v, p);
}

}  // namespace fitsum::kernels
