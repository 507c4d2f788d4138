// Implements include/fitsum/kernels/loss.h. linear_cross_entropy is a custom autograd Function with two plans:
//  - gradient in forward (the label tokens' logits fit in keep_logits_bytes): one (M, V) tensor becomes logits,
//    then softmax, then d loss / d logits in place; the states' gradient is multiplied out at once and the tensor is
//    kept for the weight's gradient, so the head costs three products, as in plain autograd, with one (M, V) buffer;
//  - chunked: the forward keeps only the states (M, D) and their log-normaliser (M); the backward walks the
//    vocabulary again, recomputing each chunk of logits (a fourth product) into its gradient.
#include "fitsum/kernels/loss.h"

#include <algorithm>
#include <limits>

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include "fitsum/kernels/onednn_linear.h"
#include "fitsum/kernels/tied_embedding.h"

namespace fitsum::kernels {

namespace F = torch::nn::functional;

at::Tensor label_cross_entropy(const at::Tensor& logits, const at::Tensor& labels) {
  const auto vocab = logits.size(-1);
  return F::cross_entropy(logits.reshape({-1, vocab}), labels.reshape({-1}),
                          F::CrossEntropyFuncOptions().ignore_index(-100));
}

TokenLoss label_loss_sum(const at::Tensor& logits, const at::Tensor& labels, double label_smoothing) {
  const auto vocab = logits.size(-1);
  auto flat_logits = logits.reshape({-1, vocab}).to(torch::kFloat);  // (N, V)
  auto flat_labels = labels.reshape({-1});                           // (N)
  TokenLoss out;
  out.tokens = flat_labels.ne(-100).sum().item<std::int64_t>();
  if (label_smoothing == 0.0) {
    out.sum = F::cross_entropy(flat_logits, flat_labels,
                               F::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
    return out;
  }
  auto neg_log_probs = -torch::log_softmax(flat_logits, -1);  // (N, V)
  auto padding = flat_labels.eq(-100);
  auto nll = neg_log_probs.gather(-1, flat_labels.clamp_min(0).unsqueeze(-1)).squeeze(-1).masked_fill(padding, 0.0);
  auto smoothed = neg_log_probs.sum(-1).masked_fill(padding, 0.0);
  out.sum = (1.0 - label_smoothing) * nll.sum() + label_smoothing * smoothed.sum() / static_cast<double>(vocab);
  return out;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Logits of vocabulary columns [begin, begin + width) for the states h (M, D)  ->  (M, width)
at::Tensor logits_chunk(const at::Tensor& h, const at::Tensor& weight, const at::Tensor& bias, std::int64_t begin,
                        std::int64_t width) {
  const auto w = weight.narrow(0, begin, width);  // (width, D)
  return bias.numel() > 0 ? dense_addmm(bias.narrow(1, begin, width), h, w.t()) : dense_mm(h, w.t());
}

// For targets (M): their column within [begin, begin + width) (clamped into it) and whether they lie there.
std::pair<at::Tensor, at::Tensor> targets_in_chunk(const at::Tensor& targets, std::int64_t begin, std::int64_t width) {
  auto local = targets - begin;
  auto inside = local.ge(0).logical_and_(local.lt(width));
  return {local.clamp_(0, width - 1).unsqueeze(1), inside};  // (M, 1), (M)
}

// z (M, V) becomes softmax(z) in place; returns each row's maximum and sum of exp(z - max) (M). On the CPU row by
// row: a row of PEGASUS's vocabulary (384 KB) stays in the core's cache through the maximum, the exp, the sum and the
// division, where whole-tensor operations would stream the (M, V) logits from memory four times. The same LibTorch
// kernels on the same values (at 128 x 96103 the same bits as z.max(1), sub_, exp_, sum(1), div_ over the whole
// tensor; elsewhere the sums may differ in their last bit, as any change of summation order does).
std::pair<at::Tensor, at::Tensor> softmax_in_place(at::Tensor& z) {
  if (!z.device().is_cpu()) {
    auto max = std::get<0>(z.max(1));
    auto sum = z.sub_(max.unsqueeze(1)).exp_().sum(1);
    z.div_(sum.unsqueeze(1));
    return {max, sum};
  }
  const auto rows = z.size(0);
  auto max = at::empty({rows}, z.options());
  auto sum = at::empty({rows}, z.options());
  for (std::int64_t i = 0; i < rows; ++i) {
    auto row = z.select(0, i);
    const auto row_max = row.max();
    row.sub_(row_max).exp_();
    const auto row_sum = row.sum();
    row.div_(row_sum);
    max.select(0, i).copy_(row_max);
    sum.select(0, i).copy_(row_sum);
  }
  return {max, sum};
}

// What the forward decided, for the backward.
struct LossPlan {
  double smoothing = 0.0;
  std::int64_t chunk = 0;            // vocabulary columns per chunk of logits
  bool gradient_in_forward = false;  // the (M, V) gradient was formed in forward and saved
  bool weight_in_place = false;      // the weight's gradient goes into weight.grad() directly
};

class LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
 public:
  // hidden (B, T, D); rows (M): flat positions of the label tokens; targets (M): their labels.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& rows, const at::Tensor& targets, double smoothing,
                            std::int64_t chunk, bool gradient_in_forward, bool weight_in_place) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto vocab = weight.size(0);
    auto h = hidden.reshape({-1, hidden.size(-1)}).index_select(0, rows).to(torch::kFloat);  // (M, D)
    const auto m = h.size(0);
    at::Tensor per_token;  // (M)
    if (gradient_in_forward) {
      // One (M, V) tensor, turned in place from logits into probabilities and then into d loss / d logits.
      auto z = bias.numel() > 0 ? dense_addmm(bias, h, weight.t()) : dense_mm(h, weight.t());  // (M, V)
      auto target_logit = z.gather(1, targets.unsqueeze(1)).squeeze(1);
      auto logit_total = smoothing != 0.0 ? z.sum(1) : at::Tensor();
      auto [max, sum] = softmax_in_place(z);
      auto lse = max.add_(sum.log_());
      per_token = lse.sub_(target_logit, 1.0 - smoothing);  // lse - (1 - eps) z_target
      if (smoothing != 0.0) per_token.sub_(logit_total, smoothing / static_cast<double>(vocab));
      // d loss / d logits = softmax - (1 - eps) onehot(target) - eps / V
      if (smoothing != 0.0) z.sub_(smoothing / static_cast<double>(vocab));
      z.scatter_add_(1, targets.unsqueeze(1), torch::full({m, 1}, -(1.0 - smoothing), z.options()));
      ctx->saved_data["grad_logits"] = z;
      ctx->saved_data["grad_h"] = dense_mm(z, weight);  // (M, D), for a unit incoming gradient
    } else {
      // Online logsumexp over the vocabulary chunks, with the target's logit and (for smoothing) the logits' sum.
      const auto float_options = h.options();
      auto running_max = torch::full({m}, -std::numeric_limits<float>::infinity(), float_options);
      auto running_sum = torch::zeros({m}, float_options);
      auto target_logit = torch::zeros({m}, float_options);
      auto logit_total = torch::zeros({m}, float_options);
      for (std::int64_t begin = 0; begin < vocab; begin += chunk) {
        const auto width = std::min(chunk, vocab - begin);
        auto logits = logits_chunk(h, weight, bias, begin, width);  // (M, width)
        const auto [local, inside] = targets_in_chunk(targets, begin, width);
        target_logit.add_(logits.gather(1, local).squeeze(1).mul_(inside));
        if (smoothing != 0.0) logit_total.add_(logits.sum(1));
        auto new_max = at::maximum(running_max, std::get<0>(logits.max(1)));
        running_sum.mul_((running_max - new_max).exp_()).add_(logits.sub_(new_max.unsqueeze(1)).exp_().sum(1));
        running_max = new_max;
      }
      auto lse = running_max.add_(running_sum.log_());
      // Per token: lse - (1 - eps) z_target - eps / V * sum_v z_v
      per_token = lse - (1.0 - smoothing) * target_logit;
      if (smoothing != 0.0) per_token.sub_(logit_total, smoothing / static_cast<double>(vocab));
      ctx->saved_data["lse"] = lse;
    }
    ctx->save_for_backward({weight, bias});
    ctx->saved_data["h"] = h;
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["targets"] = targets;
    ctx->saved_data["hidden_sizes"] = hidden.sizes().vec();
    ctx->saved_data["hidden_dtype"] = hidden.scalar_type();
    ctx->saved_data["smoothing"] = smoothing;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["gradient_in_forward"] = gradient_in_forward;
    ctx->saved_data["weight_in_place"] = weight_in_place;
    return per_token.sum();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const auto& weight = saved[0];
    const auto& bias = saved[1];
    const auto h = ctx->saved_data["h"].toTensor();
    const auto rows = ctx->saved_data["rows"].toTensor();
    const auto hidden_sizes = ctx->saved_data["hidden_sizes"].toIntVector();
    const auto hidden_dtype = ctx->saved_data["hidden_dtype"].toScalarType();
    const bool weight_in_place = ctx->saved_data["weight_in_place"].toBool();
    const auto& grad_loss = grad_outputs[0];  // ()

    const bool want_hidden = ctx->needs_input_grad(0);
    const bool want_weight = ctx->needs_input_grad(1) || weight_in_place;
    at::Tensor grad_weight;  // returned when not accumulated in place
    if (want_weight) grad_weight = weight_in_place ? gradient_buffer(weight) : torch::zeros_like(weight);
    // The incoming gradient scales the small operand: g^T (h * s) = s * g^T h.
    const auto scaled_h = h * grad_loss;  // (M, D)
    at::Tensor grad_h;                    // (M, D)
    if (ctx->saved_data["gradient_in_forward"].toBool()) {
      const auto g = ctx->saved_data["grad_logits"].toTensor();  // (M, V)
      if (want_hidden) grad_h = ctx->saved_data["grad_h"].toTensor() * grad_loss;
      if (want_weight) dense_addmm_(grad_weight, g.t(), scaled_h);  // (V, D)
    } else {
      // Recompute the logits chunk by chunk; d loss / d logits = softmax - (1 - eps) onehot(target) - eps / V.
      const auto lse = ctx->saved_data["lse"].toTensor();
      const auto targets = ctx->saved_data["targets"].toTensor();
      const double smoothing = ctx->saved_data["smoothing"].toDouble();
      const auto chunk = ctx->saved_data["chunk"].toInt();
      const auto vocab = weight.size(0);
      if (want_hidden) grad_h = torch::zeros_like(h);
      for (std::int64_t begin = 0; begin < vocab && (want_hidden || want_weight); begin += chunk) {
        const auto width = std::min(chunk, vocab - begin);
        auto g = logits_chunk(h, weight, bias, begin, width).sub_(lse.unsqueeze(1)).exp_();  // (M, width)
        if (smoothing != 0.0) g.sub_(smoothing / static_cast<double>(vocab));
        const auto [local, inside] = targets_in_chunk(targets, begin, width);
        g.scatter_add_(1, local, inside.to(g.scalar_type()).mul_(-(1.0 - smoothing)).unsqueeze(1));
        if (want_hidden) dense_addmm_(grad_h, g, weight.narrow(0, begin, width));             // (M, D)
        if (want_weight) dense_addmm_(grad_weight.narrow(0, begin, width), g.t(), scaled_h);  // (width, D)
      }
      if (want_hidden) grad_h.mul_(grad_loss);
    }
    at::Tensor grad_hidden;
    if (want_hidden) {
      std::int64_t positions = 1;
      for (std::size_t i = 0; i + 1 < hidden_sizes.size(); ++i) positions *= hidden_sizes[i];
      grad_hidden = torch::zeros({positions, hidden_sizes.back()}, h.options())
                        .index_copy_(0, rows, grad_h)
                        .view(hidden_sizes)
                        .to(hidden_dtype);
    }
    return {grad_hidden,  weight_in_place ? at::Tensor() : grad_weight,
            at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

bool bias_has_nonzero(const at::Tensor& bias) {
  return bias.defined() && bias.numel() > 0 && bias.ne(0).any().item<bool>();
}

TokenLoss linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& bias,
                               const at::Tensor& labels, const LinearCrossEntropyOptions& options) {
  TORCH_CHECK(hidden.dim() >= 2 && hidden.size(-1) == weight.size(1), "linear_cross_entropy: hidden ", hidden.sizes(),
              " does not match the head weight ", weight.sizes());
  TORCH_CHECK(weight.scalar_type() == torch::kFloat, "linear_cross_entropy: the head weight must be float32, got ",
              weight.scalar_type());
  TORCH_CHECK(!bias.defined() || !bias.requires_grad(), "linear_cross_entropy: the bias is a buffer (no gradient)");
  const auto flat = labels.reshape({-1});
  TORCH_CHECK(flat.size(0) * hidden.size(-1) == hidden.numel(), "linear_cross_entropy: labels ", labels.sizes(),
              " do not match hidden ", hidden.sizes());
  const auto* known = options.known;
  auto rows = known ? known->rows : flat.ne(-100).nonzero().squeeze(1);  // (M)
  auto targets = flat.index_select(0, rows);
  TokenLoss out;
  out.tokens = rows.size(0);
  if (out.tokens == 0) {
    out.sum = hidden.sum().to(torch::kFloat) * 0.0;  // zero, still connected to the graph
    return out;
  }
  const auto vocab = weight.size(0);
  if (!known || !known->ids_checked) {
    const auto low = targets.min().item<std::int64_t>();
    const auto high = targets.max().item<std::int64_t>();
    TORCH_CHECK(low >= 0 && high < vocab, "labels must be -100 or token ids in [0, ", vocab, "), found ",
                low < 0 ? low : high);
  }
  const auto chunk = std::min(vocab, std::max<std::int64_t>(256, options.chunk_bytes / (4 * out.tokens)));
  // Decided here, in grad mode: a custom Function's forward runs with grad mode off.
  const bool weight_in_place = accumulates_in_place(weight);
  const bool wants_gradient = torch::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  const bool gradient_in_forward = wants_gradient && out.tokens * vocab * 4 <= options.keep_logits_bytes;
  // Autograd functions take defined tensors only: no bias is an empty one. A bias of zeros (PEGASUS's
  // final_logits_bias, a buffer nobody trains) is skipped too: adding it costs a pass over the (M, V) logits.
  const bool has_bias = known ? known->bias_nonzero && bias.defined() && bias.numel() > 0 : bias_has_nonzero(bias);
  const auto bias_or_empty = has_bias ? bias.reshape({1, vocab}) : torch::empty({0}, weight.options());
  out.sum = LinearCrossEntropyFunction::apply(hidden, weight, bias_or_empty, rows, targets, options.label_smoothing,
                                              chunk, gradient_in_forward, weight_in_place);
  return out;
}

}  // namespace fitsum::kernels
