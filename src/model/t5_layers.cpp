// Implements include/fitsum/model/t5_layers.h after transformers' modeling_t5.py (4.35): T5Attention's
// _relative_position_bucket and compute_bias, T5LayerNorm, T5DenseActDense and T5DenseGatedActDense.
#include "fitsum/model/t5_layers.h"

#include <cmath>

#include <torch/autograd.h>
#include <torch/nn/functional/activation.h>

#include "fitsum/kernels/dropout.h"
#include "fitsum/model/lora.h"

namespace fitsum::model {

torch::Tensor relative_position_bucket(const torch::Tensor& relative_position, bool bidirectional,
                                       std::int64_t num_buckets, std::int64_t max_distance) {
  auto buckets = torch::zeros_like(relative_position);
  auto position = relative_position;
  if (bidirectional) {
    num_buckets /= 2;
    buckets = buckets + (position > 0).to(torch::kLong) * num_buckets;
    position = position.abs();
  } else {
    position = -torch::clamp_max(position, 0);  // distances into the past, future ones at 0
  }
  // Half the buckets are exact distances, the other half logarithmic up to max_distance.
  const std::int64_t max_exact = num_buckets / 2;
  const auto is_small = position < max_exact;
  // The float computation HF does, truncated to an integer as its .to(torch.long) does.
  auto large = max_exact + (torch::log(position.to(torch::kFloat) / static_cast<double>(max_exact)) /
                            std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
                            static_cast<double>(num_buckets - max_exact))
                               .to(torch::kLong);
  large = torch::clamp_max(large, num_buckets - 1);
  return buckets + torch::where(is_small, position, large);
}

RelativePositionBiasImpl::RelativePositionBiasImpl(std::int64_t num_buckets, std::int64_t max_distance,
                                                   std::int64_t heads, bool bidirectional)
    : num_buckets_(num_buckets), max_distance_(max_distance), bidirectional_(bidirectional) {
  relative_attention_bias =
      register_module("relative_attention_bias", torch::nn::Embedding(torch::nn::EmbeddingOptions(num_buckets, heads)));
}

torch::Tensor RelativePositionBiasImpl::forward(std::int64_t query_length, std::int64_t past_length) {
  const auto device = relative_attention_bias->weight.device();
  const auto long_options = torch::TensorOptions().dtype(torch::kLong).device(device);
  const std::int64_t key_length = past_length + query_length;
  auto query = torch::arange(past_length, key_length, long_options).unsqueeze(1);                     // (T, 1)
  auto key = torch::arange(0, key_length, long_options).unsqueeze(0);                                 // (1, S)
  auto buckets = relative_position_bucket(key - query, bidirectional_, num_buckets_, max_distance_);  // (T, S)
  auto values = relative_attention_bias->forward(buckets);                                            // (T, S, H)
  return values.permute({2, 0, 1}).unsqueeze(0);                                                      // (1, H, T, S)
}

namespace {

bool low_precision(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf;
}

// x * rstd, in weight's dtype when that is bfloat16 or float16 (T5LayerNorm's cast).
// 1 / sqrt(mean(x^2) + eps) over the last dimension, (..., 1) in float32 whatever x's dtype.
torch::Tensor reciprocal_rms(const torch::Tensor& x, double eps) {
  return torch::rsqrt(x.to(torch::kFloat).pow(2).mean(-1, /*keepdim=*/true) + eps);
}

torch::Tensor normalized(const torch::Tensor& x, const torch::Tensor& rstd, const torch::Tensor& weight) {
  auto normed = x * rstd;
  return low_precision(weight) ? normed.to(weight.scalar_type()) : normed;
}

// The plain path's autograd keeps x, a float32 copy of it when x is not float32, and the normalized x (for the
// weight's gradient): one node keeping x and the (..., 1) float32 reciprocal RMS holds one (..., D) tensor per norm,
// not two or three. With r = rsqrt(mean(x^2) + eps) and n = x r, dx = r (g_n - x r^2 mean(g_n x)), in float32.
class RMSNormFunction : public torch::autograd::Function<RMSNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    auto rstd = reciprocal_rms(x, eps);
    ctx->save_for_backward({x, weight, rstd});
    return weight * normalized(x, rstd, weight);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &rstd = saved[2];
    const auto& grad = grad_outputs[0];
    torch::Tensor grad_x, grad_weight;
    if (ctx->needs_input_grad(1)) {
      grad_weight = (grad * normalized(x, rstd, weight)).sum_to_size(weight.sizes()).to(weight.scalar_type());
    }
    if (ctx->needs_input_grad(0)) {
      const auto g = (grad * weight).to(torch::kFloat);
      const auto xf = x.to(torch::kFloat);
      grad_x = (rstd * (g - xf * rstd.square() * (g * xf).mean(-1, /*keepdim=*/true))).to(x.scalar_type());
    }
    return {grad_x, grad_weight, torch::Tensor()};
  }
};

}  // namespace

RMSNormImpl::RMSNormImpl(std::int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  if (fused) return RMSNormFunction::apply(x, weight, eps_);
  return weight * normalized(x, reciprocal_rms(x, eps_), weight);
}

T5FeedForwardImpl::T5FeedForwardImpl(std::int64_t d_model, std::int64_t d_ff, bool gated) {
  const auto linear = [](std::int64_t in, std::int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  if (gated) {
    wi_0 = register_module("wi_0", linear(d_model, d_ff));
    wi_1 = register_module("wi_1", linear(d_model, d_ff));
  } else {
    wi = register_module("wi", linear(d_model, d_ff));
  }
  wo = register_module("wo", linear(d_ff, d_model));
}

torch::Tensor T5FeedForwardImpl::forward(const torch::Tensor& x, double dropout, bool training,
                                         bool byte_mask_dropout) {
  torch::Tensor h;  // (B, T, d_ff)
  if (!wi.is_empty()) {
    h = torch::relu(project(wi, x));
  } else {
    // Two statements, so that the order of the products (and of their gradients' sum into x's) is not the compiler's
    // choice, as it is for the operands of one call (seq2seq.cpp, AttentionImpl::forward).
    auto hidden_linear = project(wi_1, x);                      // HF's names: hidden_linear, hidden_gelu
    h = torch::gelu(project(wi_0, x), "tanh") * hidden_linear;  // gelu_new is the tanh approximation
  }
  h = kernels::dropout(h, dropout, training, byte_mask_dropout);
  return project(wo, h);
}

}  // namespace fitsum::model
