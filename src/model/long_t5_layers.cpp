// Implements include/fitsum/model/long_t5_layers.h, piece by piece as transformers' modeling_longt5.py
// (_split_into_blocks, _concatenate_3_blocks, _get_local_attention_mask, _make_global_fixed_block_ids,
// _create_global_aggregates, LongT5LocalAttention, LongT5TransientGlobalAttention, LongT5Block of the encoder). The
// masks are added as -1e10, as HF adds them (not the dtype's lowest value): a query whose every key is masked (a
// padding position) then attends uniformly, and its gradient reaches the bias as it does there. Dropout is drawn in
// HF's order (attention probabilities, the attention output, the feed-forward's activation, its output).
#include "fitsum/model/long_t5_layers.h"

#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fitsum/kernels/dropout.h"
#include "fitsum/model/lora.h"

namespace fitsum::model {

namespace {

constexpr double kMasked = -1e10;  // HF's value for a disallowed key, added to the bias

namespace F = torch::nn::functional;

void check_shape(const LongT5LayerOptions& o) {
  if (o.d_model < 1 || o.heads < 1 || o.d_kv < 1) {
    throw std::invalid_argument("LongT5 attention: d_model, num_heads and d_kv must be positive, got " +
                                std::to_string(o.d_model) + ", " + std::to_string(o.heads) + " and " +
                                std::to_string(o.d_kv));
  }
  if (o.local_radius < 0) {
    throw std::invalid_argument("LongT5 attention: local_radius must not be negative, got " +
                                std::to_string(o.local_radius));
  }
}

torch::nn::Linear projection(std::int64_t in, std::int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

torch::Tensor masked_where(const torch::Tensor& allowed, const torch::TensorOptions& options) {
  return torch::where(allowed, torch::zeros({}, options), torch::full({}, kMasked, options));
}

// compute_bias(block_len): query positions K .. 2K - 1 (the middle block) against keys 0 .. 3K - 1 of the window
//   ->  (1, 1, H, K, 3K); zeros without a table.
torch::Tensor window_bias(torch::nn::Embedding table, const LongT5LayerOptions& o, const torch::Tensor& like) {
  const auto block_len = o.local_radius + 1;
  if (table.is_empty()) return torch::zeros({1, 1, o.heads, block_len, 3 * block_len}, like.options());
  const auto memory = torch::arange(3 * block_len, torch::TensorOptions().dtype(torch::kLong).device(like.device()));
  const auto context = memory.narrow(0, block_len, block_len);
  const auto relative = memory.unsqueeze(0) - context.unsqueeze(1);  // (K, 3K)
  const auto buckets = relative_position_bucket(relative, /*bidirectional=*/true, o.num_buckets, o.max_distance);
  return table->forward(buckets).permute({2, 0, 1}).unsqueeze(0).unsqueeze(0);  // (1, 1, H, K, 3K)
}

// The first block's local bias: the window's bias plus the local mask  ->  (B, N, H, K, 3K).
torch::Tensor local_position_bias(torch::nn::Embedding table, const LongT5LayerOptions& o,
                                  const torch::Tensor& attention_mask, const torch::Tensor& like) {
  const auto bias = window_bias(table, o, like);
  const auto allowed = long_t5_local_mask(attention_mask, o.local_radius + 1);  // (B, 1, N, K, 3K)
  return bias +
         masked_where(allowed, torch::TensorOptions().dtype(torch::kFloat).device(like.device())).transpose(1, 2);
}

// The projections of x (B, S, D) as (B, S, H, d_kv).
torch::Tensor heads_of(torch::nn::Linear proj, const torch::Tensor& x, const LongT5LayerOptions& o) {
  return project(proj, x).view({x.size(0), x.size(1), o.heads, o.d_kv});
}

struct SideKeys {
  torch::Tensor key, value;  // (B, 1, H, G, d_kv), or undefined for local attention
};

// The block attention both modules share: queries of each block against the keys of its 3-block window (and the side
// keys), the bias added, softmax in float32, dropout  ->  (B, S, H * d_kv), before the output projection.
torch::Tensor attend_blocks(torch::nn::Module& module, const LongT5LayerOptions& o, const torch::Tensor& hidden,
                            torch::nn::Linear q, torch::nn::Linear k, torch::nn::Linear v, const SideKeys& side,
                            const torch::Tensor& position_bias) {
  const auto batch = hidden.size(0);
  const auto length = hidden.size(1);
  const auto block_len = o.local_radius + 1;
  // (B, N, K, H, d) -> (B, N, H, K, d); keys and values over the 3-block window (B, N, H, 3K, d).
  const auto query = split_into_blocks(heads_of(q, hidden, o), block_len, 1).transpose(2, 3);
  const auto window = [&](torch::nn::Linear proj) {
    return concatenate_3_blocks(split_into_blocks(heads_of(proj, hidden, o), block_len, 1), 1, 2).transpose(2, 3);
  };
  const auto key = window(k);
  const auto value = window(v);
  auto scores = torch::matmul(query, key.transpose(-1, -2));  // (B, N, H, K, 3K), unscaled as T5's
  if (side.key.defined()) {
    scores = torch::cat({scores, torch::matmul(query, side.key.transpose(-1, -2))}, -1);  // (B, N, H, K, 3K + G)
  }
  TORCH_CHECK(position_bias.size(-1) == scores.size(-1), "LongT5 attention: the position bias covers ",
              position_bias.size(-1), " keys, the scores ", scores.size(-1),
              " (the first block's bias must come from the same attention type)");
  scores = scores + position_bias.to(scores.scalar_type());
  auto probs = torch::softmax(scores, -1, torch::kFloat).to(scores.scalar_type());
  probs = kernels::dropout(probs, o.dropout, module.is_training(), o.byte_mask_dropout);
  auto context = torch::matmul(probs.narrow(-1, 0, 3 * block_len), value);  // (B, N, H, K, d)
  if (side.key.defined()) {
    context = context + torch::matmul(probs.narrow(-1, 3 * block_len, side.value.size(-2)), side.value);
  }
  const auto blocks = context.size(1);
  return context.transpose(2, 3).reshape({batch, blocks * block_len, o.heads * o.d_kv}).narrow(1, 0, length);
}

}  // namespace

// ---- block helpers ----

torch::Tensor split_into_blocks(const torch::Tensor& x, std::int64_t block_len, std::int64_t dim) {
  TORCH_CHECK(block_len > 0, "split_into_blocks: the block length must be positive, got ", block_len);
  dim = c10::maybe_wrap_dim(dim, x.dim());
  auto padded = x;
  const auto pad = (block_len - x.size(dim) % block_len) % block_len;
  if (pad != 0 && x.numel() == 0) {
    // An empty tensor (no global blocks) cannot be padded; HF's _pad_to_multiple makes the padded shape of zeros.
    auto shape = x.sizes().vec();
    shape[static_cast<std::size_t>(dim)] += pad;
    padded = torch::zeros(shape, x.options());
  } else if (pad != 0) {
    std::vector<std::int64_t> widths(2 * static_cast<std::size_t>(x.dim()), 0);  // last dim first, as F::pad
    widths[2 * static_cast<std::size_t>(x.dim() - 1 - dim) + 1] = pad;
    padded = F::pad(x, F::PadFuncOptions(widths));
  }
  auto shape = padded.sizes().vec();
  shape[static_cast<std::size_t>(dim)] = block_len;
  shape.insert(shape.begin() + dim, padded.size(dim) / block_len);
  return padded.reshape(shape);
}

torch::Tensor concatenate_3_blocks(const torch::Tensor& x, std::int64_t block_dim, std::int64_t sequence_dim) {
  block_dim = c10::maybe_wrap_dim(block_dim, x.dim());
  const auto blocks = x.size(block_dim);
  std::vector<std::int64_t> widths(2 * static_cast<std::size_t>(x.dim()), 0);
  widths[2 * static_cast<std::size_t>(x.dim() - 1 - block_dim)] = 1;
  widths[2 * static_cast<std::size_t>(x.dim() - 1 - block_dim) + 1] = 1;
  const auto padded = F::pad(x, F::PadFuncOptions(widths));  // N + 2 blocks
  return torch::cat(
      {padded.narrow(block_dim, 0, blocks), padded.narrow(block_dim, 1, blocks), padded.narrow(block_dim, 2, blocks)},
      sequence_dim);
}

torch::Tensor long_t5_local_mask(const torch::Tensor& attention_mask, std::int64_t block_len) {
  TORCH_CHECK(attention_mask.dim() == 2, "LongT5: the attention mask must be (batch, length), got ",
              attention_mask.sizes());
  const auto blocked = split_into_blocks(attention_mask, block_len, 1);            // (B, N, K)
  const auto window = concatenate_3_blocks(blocked, 1, 2);                         // (B, N, 3K)
  auto allowed = torch::logical_and(blocked.unsqueeze(-1), window.unsqueeze(-2));  // (B, N, K, 3K)
  const auto positions = torch::arange(3 * block_len, attention_mask.options().dtype(torch::kLong));
  const auto relative = positions.unsqueeze(0) - positions.narrow(0, block_len, block_len).unsqueeze(1);  // (K, 3K)
  allowed = torch::logical_and(allowed, relative.abs() < block_len);  // no further than local_radius
  return allowed.unsqueeze(1);                                        // (B, 1, N, K, 3K)
}

GlobalBlockIds global_fixed_block_ids(const torch::Tensor& attention_mask, std::int64_t global_block_size) {
  TORCH_CHECK(attention_mask.dim() == 2, "LongT5: the attention mask must be (batch, length), got ",
              attention_mask.sizes());
  TORCH_CHECK(global_block_size > 0, "LongT5: global_block_size must be positive, got ", global_block_size);
  const auto batch = attention_mask.size(0);
  const auto length = attention_mask.size(1);
  const auto float_options = attention_mask.options().dtype(torch::kFloat);
  const auto long_mask = attention_mask.to(torch::kLong);
  // HF: the running position / global_block_size in float32, floored, for real tokens; -1 for padding.
  auto fixed = torch::ones({batch, length}, float_options) / static_cast<double>(global_block_size);
  fixed = torch::cumsum(fixed, 1) - fixed;
  const auto real = attention_mask != 0;
  const auto offset = torch::where(real, torch::ones({}, float_options), torch::full({}, -1000.0, float_options));
  auto ids = torch::floor(offset + fixed - 1.0).to(torch::kLong);
  ids = torch::clamp_min(ids, -1);
  ids = ids * long_mask + (long_mask - 1);
  // Orphans (the tokens after the last full block) join the last full block.
  const auto ends = torch::arange(length, long_mask.options()).remainder(global_block_size) == global_block_size - 1;
  const auto full_blocks = torch::logical_and(ends, ids >= 0).sum(-1, /*keepdim=*/true) - 1;  // (B, 1)
  ids = torch::where(ids < full_blocks, ids, full_blocks);
  const auto global_len = length / global_block_size;
  const auto positions = torch::arange(global_len, long_mask.options()).unsqueeze(0);  // (1, G)
  const auto last =
      global_len > 0 ? std::get<0>(ids.max(-1, /*keepdim=*/true)) : torch::zeros({batch, 1}, ids.options());
  return {ids, (positions <= last).to(torch::kLong).expand({batch, global_len}).contiguous()};
}

torch::Tensor global_aggregates(const torch::Tensor& hidden, const torch::Tensor& block_ids, std::int64_t global_len) {
  // One-hot over G + 1 classes, padding in the last, which is dropped.    (B, S, G)
  const auto ids = torch::where(block_ids >= 0, block_ids, torch::full({}, global_len, block_ids.options()));
  const auto one_hot = torch::one_hot(ids, global_len + 1).narrow(-1, 0, global_len).to(hidden.scalar_type());
  return torch::matmul(one_hot.transpose(1, 2), hidden);  // (B, G, D)
}

// ---- LongT5LocalAttention ----

LongT5LocalAttentionImpl::LongT5LocalAttentionImpl(const LongT5LayerOptions& options) : options_(options) {
  check_shape(options);
  const auto inner = options.heads * options.d_kv;
  q = register_module("q", projection(options.d_model, inner));
  k = register_module("k", projection(options.d_model, inner));
  v = register_module("v", projection(options.d_model, inner));
  o = register_module("o", projection(inner, options.d_model));
  if (options.has_relative_attention_bias) {
    relative_attention_bias =
        register_module("relative_attention_bias",
                        torch::nn::Embedding(torch::nn::EmbeddingOptions(options.num_buckets, options.heads)));
  }
}

LongT5Attended LongT5LocalAttentionImpl::forward(const torch::Tensor& hidden, const torch::Tensor& attention_mask,
                                                 const torch::Tensor& position_bias) {
  TORCH_CHECK(hidden.dim() == 3 && attention_mask.dim() == 2 && attention_mask.size(0) == hidden.size(0) &&
                  attention_mask.size(1) == hidden.size(1),
              "LongT5 local attention: hidden (B, S, D) and attention_mask (B, S) expected, got ", hidden.sizes(),
              " and ", attention_mask.sizes());
  const auto bias = position_bias.defined()
                        ? position_bias
                        : local_position_bias(relative_attention_bias, options_, attention_mask, hidden);
  const auto context = attend_blocks(*this, options_, hidden, q, k, v, {}, bias);
  return {project(o, context), bias};
}

// ---- LongT5TransientGlobalAttention ----

LongT5TransientGlobalAttentionImpl::LongT5TransientGlobalAttentionImpl(const LongT5LayerOptions& options)
    : options_(options) {
  check_shape(options);
  if (options.global_block_size < 1) {
    throw std::invalid_argument("LongT5 transient-global attention: global_block_size must be positive, got " +
                                std::to_string(options.global_block_size));
  }
  const auto inner = options.heads * options.d_kv;
  q = register_module("q", projection(options.d_model, inner));
  k = register_module("k", projection(options.d_model, inner));
  v = register_module("v", projection(options.d_model, inner));
  o = register_module("o", projection(inner, options.d_model));
  if (options.has_relative_attention_bias) {
    const auto table = [&] {
      return torch::nn::Embedding(torch::nn::EmbeddingOptions(options.num_buckets, options.heads));
    };
    relative_attention_bias = register_module("relative_attention_bias", table());
    global_relative_attention_bias = register_module("global_relative_attention_bias", table());
  }
  global_input_layer_norm =
      register_module("global_input_layer_norm", RMSNorm(options.d_model, options.layer_norm_eps));
}

torch::Tensor LongT5TransientGlobalAttentionImpl::first_position_bias(const torch::Tensor& attention_mask,
                                                                      const GlobalBlockIds& ids) {
  TORCH_CHECK(!global_relative_attention_bias.is_empty(),
              "LongT5 transient-global attention: a block without global_relative_attention_bias needs the first "
              "block's position_bias");
  const auto& table = global_relative_attention_bias->weight;
  const auto local = local_position_bias(relative_attention_bias, options_, attention_mask, table);  // (B,N,H,K,3K)
  // compute_side_bias: a token sees the global blocks whose segment id equals its mask value (so real tokens the
  // blocks holding real tokens), with a bias by the distance from its own global block.
  const auto global_len = ids.segment_ids.size(1);
  const auto same = torch::eq(attention_mask.to(torch::kLong).unsqueeze(-1), ids.segment_ids.unsqueeze(1));  // B,S,G
  const auto side_mask = masked_where(same, table.options().dtype(torch::kFloat)).unsqueeze(1);  // (B, 1, S, G)
  const auto relative = torch::arange(global_len, ids.block_ids.options()) - ids.block_ids.unsqueeze(-1);
  const auto buckets =
      relative_position_bucket(relative, /*bidirectional=*/true, options_.num_buckets, options_.max_distance);
  const auto side_bias = global_relative_attention_bias->forward(buckets).permute({0, 3, 1, 2});  // (B, H, S, G)
  const auto side = split_into_blocks(side_mask + side_bias, options_.local_radius + 1, -2).transpose(1, 2);
  return torch::cat({local.to(side.scalar_type()), side}, -1);  // (B, N, H, K, 3K + G)
}

LongT5Attended LongT5TransientGlobalAttentionImpl::forward(const torch::Tensor& hidden,
                                                           const torch::Tensor& attention_mask,
                                                           const torch::Tensor& position_bias) {
  TORCH_CHECK(hidden.dim() == 3 && attention_mask.dim() == 2 && attention_mask.size(0) == hidden.size(0) &&
                  attention_mask.size(1) == hidden.size(1),
              "LongT5 transient-global attention: hidden (B, S, D) and attention_mask (B, S) expected, got ",
              hidden.sizes(), " and ", attention_mask.sizes());
  const auto ids = global_fixed_block_ids(attention_mask, options_.global_block_size);
  const auto global_len = ids.segment_ids.size(1);
  // The side keys and values: each global block's summed states, RMS-normalized.    (B, 1, H, G, d_kv)
  const auto global_inputs = global_input_layer_norm->forward(global_aggregates(hidden, ids.block_ids, global_len));
  const auto side_heads = [&](torch::nn::Linear proj) {
    return heads_of(proj, global_inputs, options_).transpose(1, 2).unsqueeze(1);
  };
  const SideKeys side{side_heads(k), side_heads(v)};
  const auto bias = position_bias.defined() ? position_bias : first_position_bias(attention_mask, ids);
  const auto context = attend_blocks(*this, options_, hidden, q, k, v, side, bias);
  return {project(o, context), bias};
}

// ---- LongT5EncoderBlock ----

namespace {

// One sub-layer under HF's names: {`name`: block, layer_norm: RMSNorm}.
std::shared_ptr<torch::nn::Module> sub_layer(const char* name, const std::shared_ptr<torch::nn::Module>& block,
                                             RMSNorm& norm, const LongT5LayerOptions& o) {
  auto holder = std::make_shared<torch::nn::Module>();
  holder->register_module(name, block);
  norm = holder->register_module("layer_norm", RMSNorm(o.d_model, o.layer_norm_eps));
  return holder;
}

}  // namespace

LongT5EncoderBlockImpl::LongT5EncoderBlockImpl(const LongT5LayerOptions& o) : options_(o) {
  layer = register_module("layer", torch::nn::ModuleList());
  if (o.attention_type == LongT5AttentionType::local) {
    local_attention = LongT5LocalAttention(o);
    layer->push_back(sub_layer("LocalSelfAttention", local_attention.ptr(), attention_norm, o));
  } else {
    global_attention = LongT5TransientGlobalAttention(o);
    layer->push_back(sub_layer("TransientGlobalSelfAttention", global_attention.ptr(), attention_norm, o));
  }
  ff = T5FeedForward(o.d_model, o.d_ff, o.gated_ffn);
  layer->push_back(sub_layer("DenseReluDense", ff.ptr(), ff_norm, o));
}

void LongT5EncoderBlockImpl::set_kernel_choices(bool byte_mask_dropout, bool fused_rms_norm) {
  options_.byte_mask_dropout = byte_mask_dropout;
  attention_norm->fused = ff_norm->fused = fused_rms_norm;
  if (!local_attention.is_empty()) local_attention->set_byte_mask_dropout(byte_mask_dropout);
  if (!global_attention.is_empty()) {
    global_attention->set_byte_mask_dropout(byte_mask_dropout);
    global_attention->global_input_layer_norm->fused = fused_rms_norm;
  }
}

LongT5Attended LongT5EncoderBlockImpl::forward(const torch::Tensor& hidden, const torch::Tensor& attention_mask,
                                               const torch::Tensor& position_bias) {
  const bool training = is_training();
  const auto& o = options_;
  const auto normed = attention_norm->forward(hidden);
  auto attended = local_attention.is_empty() ? global_attention->forward(normed, attention_mask, position_bias)
                                             : local_attention->forward(normed, attention_mask, position_bias);
  auto h = hidden + kernels::dropout(attended.hidden, o.dropout, training, o.byte_mask_dropout);
  h = h + kernels::dropout(ff->forward(ff_norm->forward(h), o.dropout, training, o.byte_mask_dropout), o.dropout,
                         training, o.byte_mask_dropout);
  return {h, attended.position_bias};
}

torch::Tensor run_long_t5_blocks(const torch::nn::ModuleList& blocks, const torch::Tensor& hidden,
                                 const torch::Tensor& attention_mask) {
  LongT5Attended state{hidden, {}};
  for (const auto& block : *blocks) {
    state = block->as<LongT5EncoderBlock>()->forward(state.hidden, attention_mask, state.position_bias);
  }
  return state.hidden;
}

}  // namespace fitsum::model
