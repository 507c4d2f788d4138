// Implements include/fitsum/model/pegasus_x_layers.h, block by block as transformers' modeling_pegasus_x.py
// (PegasusXSinusoidalPositionalEmbedding, PegasusXEncoder.forward's padding, PegasusXGlobalLocalAttention,
// PegasusXEncoderLayer). Dropout is drawn in HF's order (global then local attention probabilities; then the
// tokens' and the global tokens' attention outputs; then the tokens' feed-forward, then the global tokens'), so that
// with torch::dropout a seed gives HF's masks.
#include "fitsum/model/pegasus_x_layers.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "fitsum/kernels/attention_dropout.h"
#include "fitsum/kernels/dropout.h"
#include "fitsum/kernels/feed_forward.h"
#include "fitsum/kernels/few_rows_linear.h"
#include "fitsum/model/lora.h"
#include "fitsum/model/seq2seq.h"

namespace fitsum::model {

torch::Tensor pegasus_x_positions(std::int64_t length, std::int64_t dim, std::int64_t past_length,
                                  torch::ScalarType dtype, torch::Device device) {
  if (dim < 4 || dim % 2 != 0) {
    throw std::invalid_argument("PEGASUS-X's sinusoidal positions need an even width of at least 4, got d_model " +
                                std::to_string(dim));
  }
  const auto half = dim / 2;
  const auto options = torch::TensorOptions().device(device);
  // HF: exp(arange(half) * -(ln(10000) / (half - 1))), in the embeddings' dtype.    (half)
  const double step = -(std::log(10000.0) / static_cast<double>(half - 1));
  const auto div_term = torch::exp(torch::arange(half, options.dtype(torch::kLong)).to(dtype) * step);
  // (length, 1) int64 times (half) -> (length, half) in dtype, as HF's positions[:, None] * div_term.
  const auto positions = torch::arange(past_length, past_length + length, options.dtype(torch::kLong)).unsqueeze(1);
  const auto angles = positions * div_term;
  return torch::cat({torch::sin(angles), torch::cos(angles)}, 1);  // (length, dim)
}

BlockPadded pad_to_blocks(const torch::Tensor& hidden, const torch::Tensor& attention_mask, std::int64_t block_size) {
  TORCH_CHECK(hidden.dim() == 3 && attention_mask.dim() == 2 && attention_mask.size(0) == hidden.size(0) &&
                  attention_mask.size(1) == hidden.size(1),
              "pad_to_blocks: hidden (B, S, D) and attention_mask (B, S) expected, got ", hidden.sizes(), " and ",
              attention_mask.sizes());
  TORCH_CHECK(block_size > 0, "pad_to_blocks: block_size must be positive, got ", block_size);
  const double lowest = padding_mask_value(hidden.scalar_type());
  // HF: 1 - mask, with every non-zero entry replaced by the lowest value.    (B, S)
  const auto inverted = 1.0 - attention_mask.to(hidden.scalar_type());
  auto mask = inverted.masked_fill(inverted.to(torch::kBool), lowest);
  const auto length = hidden.size(1);
  if (length % block_size == 0) return {hidden, mask};
  const auto pad = block_size - length % block_size;
  namespace F = torch::nn::functional;
  return {F::pad(hidden, F::PadFuncOptions({0, 0, 0, pad})),         // (B, P, D)
          F::pad(mask, F::PadFuncOptions({0, pad}).value(lowest))};  // (B, P)
}

torch::Tensor global_token_states(const torch::Tensor& embed_global, std::int64_t batch) {
  const auto count = embed_global.size(0);
  const auto ids = torch::arange(count, torch::TensorOptions().dtype(torch::kLong).device(embed_global.device()));
  return torch::embedding(embed_global, ids.unsqueeze(0).expand({batch, count}));  // (B, G, D)
}

// ---- PegasusXGlobalLocalAttention ----

PegasusXGlobalLocalAttentionImpl::PegasusXGlobalLocalAttentionImpl(std::int64_t d_model, std::int64_t heads,
                                                                   std::int64_t block_size, double dropout)
    : heads_(heads), head_dim_(heads > 0 ? d_model / heads : 0), block_size_(block_size), dropout_(dropout) {
  if (heads < 1 || d_model % heads != 0) {
    throw std::invalid_argument("PEGASUS-X attention: d_model " + std::to_string(d_model) +
                                " is not divisible by encoder_attention_heads " + std::to_string(heads));
  }
  if (block_size < 1) {
    throw std::invalid_argument("PEGASUS-X attention: block_size must be positive, got " + std::to_string(block_size));
  }
  scaling_ = std::pow(static_cast<double>(head_dim_), -0.5);
  const auto linear = [&] { return torch::nn::Linear(torch::nn::LinearOptions(d_model, d_model).bias(false)); };
  k_proj = register_module("k_proj", linear());
  v_proj = register_module("v_proj", linear());
  q_proj = register_module("q_proj", linear());
  out_proj = register_module("out_proj", linear());
}

torch::Tensor PegasusXGlobalLocalAttentionImpl::split_heads(const torch::Tensor& x) const {
  return x.view({x.size(0), x.size(1), heads_, head_dim_}).transpose(1, 2);
}

torch::Tensor PegasusXGlobalLocalAttentionImpl::merge_heads(const torch::Tensor& x) const {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), heads_ * head_dim_});
}

PegasusXStates PegasusXGlobalLocalAttentionImpl::forward(const torch::Tensor& hidden, const torch::Tensor& global,
                                                         const torch::Tensor& mask) {
  const auto batch = hidden.size(0);
  const auto length = hidden.size(1);
  const auto global_len = global.size(1);
  TORCH_CHECK(length % block_size_ == 0, "PEGASUS-X attention: ", length,
              " positions are not a multiple of block_size ", block_size_, " (pad_to_blocks pads them)");
  TORCH_CHECK(mask.dim() == 2 && mask.size(0) == batch && mask.size(1) == length,
              "PEGASUS-X attention: the additive mask must be (", batch, ", ", length, "), got ", mask.sizes());
  const auto blocks = length / block_size_;
  // Queries scaled after the projection, as HF.    (B, H, P, hd) and (B, H, G, hd)
  const auto local_q = split_heads(project(q_proj, hidden) * scaling_);
  const auto local_k = split_heads(project(k_proj, hidden));
  const auto local_v = split_heads(project(v_proj, hidden));
  const auto global_q = split_heads(project(q_proj, global) * scaling_);
  const auto global_k = split_heads(project(k_proj, global));
  const auto global_v = split_heads(project(v_proj, global));
  namespace F = torch::nn::functional;

  const bool training = is_training();
  // Each attention from its scores' operands to its context as one node where it applies, the probabilities
  // recomputed in backward (kernels/attention_dropout.h); elsewhere kernels::matmul's products (oneDNN's sgemm where
  // available, on the linear layers' threads), each with operands of the same leading dimensions: a product with the
  // global tokens' keys or values runs over all P positions at once, (B, H, P, .) x (B, H, ., G), viewed as blocks.
  // Global tokens attend to the global tokens and to every position; global keys are never masked.
  const auto all_k = torch::cat({global_k, local_k}, 2);                      // (B, H, G + P, hd)
  const auto all_v = torch::cat({global_v, local_v}, 2);                      // (B, H, G + P, hd)
  const auto global_mask = F::pad(mask, F::PadFuncOptions({global_len, 0}));  // (B, G + P)
  const auto global_context =
      kernels::attention_context(global_q, all_k.transpose(-1, -2), global_mask.unsqueeze(1).unsqueeze(1), all_v,
                                 dropout_, training, byte_mask_dropout_, recomputed_dropout_);  // (B, H, G, hd)

  // Each position attends to the global tokens and to the positions of its own block.
  const std::vector<std::int64_t> blocked{batch, heads_, blocks, block_size_, head_dim_};
  const auto block_q = local_q.reshape(blocked);  // (B, H, N, K, hd)
  const auto block_k = local_k.reshape(blocked);
  const auto block_v = local_v.reshape(blocked);
  const auto block_mask = F::pad(mask.view({batch, blocks, block_size_}), F::PadFuncOptions({global_len, 0}));
  const auto local_context = kernels::global_local_context(
      local_q, global_k.transpose(-1, -2), block_q, block_k.transpose(-1, -2), block_mask.unsqueeze(1).unsqueeze(3),
      global_v, block_v, dropout_, training, byte_mask_dropout_, recomputed_dropout_);  // (B, H, P, hd)

  auto global_out = project(out_proj, merge_heads(global_context));  // (B, G, D)
  auto local_out = project(out_proj, merge_heads(local_context));    // (B, P, D)
  return {local_out, global_out};
}

// ---- PegasusXEncoderLayer ----

PegasusXEncoderLayerImpl::PegasusXEncoderLayerImpl(const PegasusXLayerOptions& o) : options_(o) {
  if (o.stagger_blocks && o.block_size % 2 != 0) {
    throw std::invalid_argument("PEGASUS-X: block_size " + std::to_string(o.block_size) +
                                " is odd, and a staggered layer shifts the blocks by half a block; use an even "
                                "block_size or stagger_local_blocks false");
  }
  const auto norm = [&] {
    return torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.d_model}).eps(o.layer_norm_eps));
  };
  // HF's registration order (named_parameters, saved checkpoints).
  self_attn =
      register_module("self_attn", PegasusXGlobalLocalAttention(o.d_model, o.heads, o.block_size, o.attention_dropout));
  self_attn->set_byte_mask_dropout(o.byte_mask_dropout);
  self_attn->set_recomputed_dropout(o.recomputed_attention_dropout);
  self_attn_layer_norm = register_module("self_attn_layer_norm", norm());
  global_self_attn_layer_norm = register_module("global_self_attn_layer_norm", norm());
  fc1 = register_module("fc1", torch::nn::Linear(o.d_model, o.ffn_dim));
  fc2 = register_module("fc2", torch::nn::Linear(o.ffn_dim, o.d_model));
  final_layer_norm = register_module("final_layer_norm", norm());
}

void PegasusXEncoderLayerImpl::set_kernel_choices(bool byte_mask_dropout, bool recomputed_feed_forward,
                                                  bool recomputed_attention_dropout) {
  options_.byte_mask_dropout = byte_mask_dropout;
  options_.recomputed_feed_forward = recomputed_feed_forward;
  options_.recomputed_attention_dropout = recomputed_attention_dropout;
  self_attn->set_byte_mask_dropout(byte_mask_dropout);
  self_attn->set_recomputed_dropout(recomputed_attention_dropout);
}

torch::Tensor PegasusXEncoderLayerImpl::feed_forward(const torch::Tensor& x) {
  const bool training = is_training();
  const auto& o = options_;
  auto u = project(fc1, final_layer_norm->forward(x));
  torch::Tensor out;
  if (lora_adapter_of(*fc2)) {  // fc2's adapter takes fc2's input, which the recomputing node never holds
    auto h = kernels::dropout(kernels::activate(u, o.activation), o.activation_dropout, training, o.byte_mask_dropout);
    out = project(fc2, h);
  } else {
    // fc2(dropout(act(u))) as the standard layers compute it (kernels/feed_forward.h: the same values, without the
    // (B, P, ffn) input of fc2 kept for backward).
    out = kernels::activation_dropout_linear(std::move(u), o.activation, o.activation_dropout, training,
                                             o.byte_mask_dropout, fc2->weight, fc2->bias, o.recomputed_feed_forward);
  }
  return x + kernels::dropout(out, o.dropout, training, o.byte_mask_dropout);
}

PegasusXStates PegasusXEncoderLayerImpl::forward(const torch::Tensor& hidden, const torch::Tensor& global,
                                                 const torch::Tensor& mask) {
  const bool training = is_training();
  auto h = self_attn_layer_norm->forward(hidden);         // (B, P, D)
  auto g = global_self_attn_layer_norm->forward(global);  // (B, G, D)
  auto m = mask;                                          // (B, P)
  const auto half_block = options_.block_size / 2;
  if (options_.stagger_blocks) {
    // Half a block of masked zeros at both ends: the blocks now straddle the unstaggered layers' boundaries.
    namespace F = torch::nn::functional;
    h = F::pad(h, F::PadFuncOptions({0, 0, half_block, half_block}));  // (B, P + K, D)
    m = F::pad(m, F::PadFuncOptions({half_block, half_block}).value(padding_mask_value(h.scalar_type())));
  }
  auto attended = self_attn->forward(h, g, m);
  if (options_.stagger_blocks) attended.hidden = attended.hidden.narrow(1, half_block, hidden.size(1));
  // One statement each: HF draws the tokens' dropout mask before the global tokens'.
  auto new_hidden = hidden + kernels::dropout(attended.hidden, options_.dropout, training, options_.byte_mask_dropout);
  auto new_global = global + kernels::dropout(attended.global, options_.dropout, training, options_.byte_mask_dropout);
  new_hidden = feed_forward(new_hidden);
  new_global = feed_forward(new_global);
  return {new_hidden, new_global};
}

}  // namespace fitsum::model
