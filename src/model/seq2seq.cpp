// Implements include/fitsum/model/seq2seq.h. Each block mirrors the HF module named in its comment
// (transformers/models/pegasus/modeling_pegasus.py; BART's post-LayerNorm variant through normalize_before).
#include "fitsum/model/seq2seq.h"

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

#include <torch/torch.h>

#include "fitsum/kernels/dropout.h"
#include "fitsum/kernels/feed_forward.h"
#include "fitsum/kernels/few_rows_linear.h"
#include "fitsum/kernels/tied_embedding.h"
#include "fitsum/model/activation_checkpoint.h"
#include "fitsum/model/host_checked_ids.h"
#include "fitsum/model/long_t5_layers.h"
#include "fitsum/model/lora.h"
#include "fitsum/model/pegasus_x_layers.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::model {

double padding_mask_value(torch::ScalarType dtype) {
  return dtype == torch::kBFloat16 ? -3.3895313892515355e38 : std::numeric_limits<float>::lowest();
}

torch::Tensor padding_mask(const torch::Tensor& attention_mask, torch::ScalarType dtype) {
  TORCH_CHECK(attention_mask.dim() == 2, "attention_mask must be (batch, length), got ", attention_mask.sizes());
  const double lowest = padding_mask_value(dtype);
  // (B, S) -> (B, 1, 1, S): 0 where attending is allowed, the lowest finite value where the key is padding.
  auto allowed = attention_mask.to(dtype).unsqueeze(1).unsqueeze(2);
  return (1.0 - allowed) * lowest;
}

torch::Tensor causal_mask(std::int64_t query_length, std::int64_t past_length, torch::ScalarType dtype,
                          torch::Device device) {
  const double lowest = padding_mask_value(dtype);
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  // Key j is hidden from query i when j > past_length + i.   (T, past + T)
  auto mask = torch::full({query_length, past_length + query_length}, lowest, options);
  mask = torch::triu(mask, past_length + 1);
  return mask.unsqueeze(0).unsqueeze(0);
}

// ---- Attention (HF PegasusAttention) ----

AttentionImpl::AttentionImpl(std::int64_t d_model, std::int64_t heads, double dropout)
    : AttentionImpl(AttentionShape{d_model, heads, 0, dropout}) {}

AttentionImpl::AttentionImpl(const AttentionShape& shape)
    : heads_(shape.heads),
      head_dim_(shape.head_dim > 0 ? shape.head_dim : shape.d_model / shape.heads),
      scaling_(shape.scale_scores ? std::pow(static_cast<double>(head_dim_), -0.5) : 1.0),
      dropout_(shape.dropout) {
  const auto inner = heads_ * head_dim_;
  const auto linear = [&](std::int64_t in, std::int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(shape.bias));
  };
  // Registration order is each layout's (layers: k, v, q, out; blocks: q, k, v, o).
  if (shape.layout == ModuleLayout::blocks) {
    q_proj = register_module("q", linear(shape.d_model, inner));
    k_proj = register_module("k", linear(shape.d_model, inner));
    v_proj = register_module("v", linear(shape.d_model, inner));
    out_proj = register_module("o", linear(inner, shape.d_model));
  } else {
    k_proj = register_module("k_proj", linear(shape.d_model, inner));
    v_proj = register_module("v_proj", linear(shape.d_model, inner));
    q_proj = register_module("q_proj", linear(shape.d_model, inner));
    out_proj = register_module("out_proj", linear(inner, shape.d_model));
  }
}

torch::Tensor AttentionImpl::split_heads(const torch::Tensor& x) const {
  // (B, T, D) -> (B, heads, T, head_dim)
  return x.view({x.size(0), x.size(1), heads_, head_dim_}).transpose(1, 2);
}

torch::Tensor AttentionImpl::attend(const torch::Tensor& x, const torch::Tensor& key, const torch::Tensor& value,
                                    const torch::Tensor& mask, std::int64_t group) {
  const auto batch = x.size(0);
  const auto length = x.size(1);
  // HF scales the projected queries (bias included) before the product; T5's unscaled scores skip it.
  auto query = split_heads(scaling_ == 1.0 ? project(q_proj, x) : project(q_proj, x) * scaling_);  // (B, H, T, hd)
  if (group > 1) {
    // The queries of a group's rows become one row's positions: (B, H, T, hd) -> (B / group, H, group * T, hd).
    TORCH_CHECK(batch == key.size(0) * group && (!mask.defined() || mask.size(0) == 1 || mask.size(2) == 1),
                "Attention: ", batch, " query rows in groups of ", group, " for ", key.size(0), " key rows");
    query = query.view({batch / group, group, heads_, length, head_dim_})
                .transpose(1, 2)
                .reshape({batch / group, heads_, group * length, head_dim_});
  }
  torch::Tensor context;
#if FITSUM_HAS_SDPA
  // The fused kernels keep no (T, S) probabilities for backward; the mask broadcasts over heads as it is. A mask
  // of another dtype than the (autocast) queries is converted, keeping "hidden" finite: padding_mask's values.
  c10::optional<at::Tensor> attention_mask;
  if (mask.defined()) {
    attention_mask = mask.scalar_type() == query.scalar_type()
                         ? mask
                         : mask.to(query.scalar_type()).clamp_min(padding_mask_value(query.scalar_type()));
  }
  context = at::scaled_dot_product_attention(query, key, value, attention_mask, is_training() ? dropout_ : 0.0,
                                             /*is_causal=*/false, /*scale=*/1.0);
#else
  // One query position per row over a few keys (a decoding step's self-attention early in the sequence): LibTorch
  // 1.x's CPU bmm makes one BLAS call per row and head, each a vector times a matrix, and the calls cost more than
  // the arithmetic; broadcast products summed over head_dim (then over the key positions) compute the same in two
  // element-wise kernels. They hold a (B, H, S, hd) temporary, so past a few dozen keys bmm wins again (measured
  // at 4-64 rows x 8-16 heads x 64 wide: the sums 1.5-5x faster up to 32 keys, bmm faster from 128).
  // In evaluation, a few query rows (a decoding step) take fitsum's batched kernels instead (few_rows_linear.h;
  // cross-attention of 4 sources x 8 beams over 200 positions: 0.25 -> 0.05 ms per layer); training uses
  // dense_matmul's products whatever the shape (onednn_linear.h), as linear() uses dense_linear's.
  constexpr std::int64_t few_keys = 32;
  const bool few_rows = !is_training() && kernels::few_rows_attention_applies(query, key, value);
  const bool one_query = !few_rows && query.size(2) == 1 && key.size(2) <= few_keys;
  // Many query rows in evaluation (the encoder's): oneDNN's products where it applies (onednn_linear.h), on the
  // same threads as the linear layers' (LibTorch's bmm would wake OpenBLAS's, and the two pools' spinning threads
  // slow each other down on a machine with few cores).
  auto scores = few_rows    ? kernels::few_rows_scores(query, key)
                : one_query ? (query * key).sum(-1).unsqueeze(2)                             // (B, H, 1, S)
                            : kernels::matmul(query, key.transpose(-1, -2), is_training());  // (B, H, T, S)
  if (mask.defined()) {
    // In place when the dtypes agree (the product's backward needs only its operands); under autocast the float
    // mask promotes the bfloat16 scores to float, as before.
    scores = scores.scalar_type() == mask.scalar_type() ? scores.add_(mask) : scores + mask;
  }
  auto probs = torch::softmax(scores, -1);
  probs = kernels::dropout(probs, dropout_, is_training(), byte_mask_dropout_);
  context = few_rows    ? kernels::few_rows_context(probs, value)
            : one_query ? (probs.transpose(-1, -2) * value).sum(2).unsqueeze(2)  // (B, H, 1, hd)
                        : kernels::matmul(probs, value, is_training());          // (B, H, T, hd)
#endif
  if (group > 1) {
    context = context.view({batch / group, heads_, group, length, head_dim_})
                  .transpose(1, 2)
                  .reshape({batch, heads_, length, head_dim_});
  }
  context = context.transpose(1, 2).reshape({batch, length, heads_ * head_dim_});  // (B, T, D)
  return project(out_proj, context);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& kv, const torch::Tensor& mask) {
  // One statement each, in this order: as two arguments of one call they would be evaluated in the compiler's order
  // (GCC's right to left, Clang's left to right), and with it the order in which the backward adds their gradients
  // into kv's: the same model would round differently depending on the compiler that built it.
  auto value = split_heads(project(v_proj, kv));
  auto key = split_heads(project(k_proj, kv));
  return attend(x, key, value, mask);
}

torch::Tensor AttentionImpl::forward_self_cached(const torch::Tensor& x, const torch::Tensor& mask,
                                                 AttentionCache& cache) {
  auto key = split_heads(project(k_proj, x));
  auto value = split_heads(project(v_proj, x));
  if (!cache.empty()) {
    key = torch::cat({cache.key, key}, 2);
    value = torch::cat({cache.value, value}, 2);
  }
  cache.key = key;
  cache.value = value;
  return attend(x, key, value, mask);
}

torch::Tensor AttentionImpl::forward_cross_cached(const torch::Tensor& x, const torch::Tensor& kv,
                                                  const torch::Tensor& mask, AttentionCache& cache) {
  if (cache.empty()) {
    // Stored contiguous in (B, H, S, hd): the head-split view of the projection would make every later step's two
    // products copy the keys and values of all source positions again.
    cache.key = split_heads(project(k_proj, kv)).contiguous();
    cache.value = split_heads(project(v_proj, kv)).contiguous();
  }
  return attend(x, cache.key, cache.value, mask, cache.group);
}

// ---- Layers (HF PegasusEncoderLayer / PegasusDecoderLayer) ----

namespace {

LayerSettings layer_settings(const ModelConfig& c) {
  LayerSettings s;
  s.activation = c.activation_function;
  s.dropout = c.dropout;
  s.activation_dropout = c.activation_dropout;
  s.normalize_before = c.normalize_before;
  return s;
}

torch::nn::LayerNorm make_layer_norm(const ModelConfig& c) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model}).eps(c.layer_norm_eps));
}

// residual + dropout(block(norm(x))) for pre-LN; norm(residual + dropout(block(x))) for post-LN.
template <typename Block>
torch::Tensor residual_block(const torch::Tensor& hidden, torch::nn::LayerNorm& norm, const LayerSettings& s,
                             bool training, Block&& block) {
  if (s.normalize_before) {
    return hidden + kernels::dropout(block(norm->forward(hidden)), s.dropout, training, s.byte_mask_dropout);
  }
  return norm->forward(hidden + kernels::dropout(block(hidden), s.dropout, training, s.byte_mask_dropout));
}

torch::Tensor feed_forward(const torch::Tensor& x, torch::nn::Linear& fc1, torch::nn::Linear& fc2,
                           const LayerSettings& s, bool training) {
  if (lora_adapter_of(*fc2)) {  // fc2's adapter takes fc2's input, which the fused node never holds
    auto h = kernels::dropout(kernels::activate(project(fc1, x), s.activation), s.activation_dropout, training,
                              s.byte_mask_dropout);
    return project(fc2, h);
  }
  return kernels::activation_dropout_linear(project(fc1, x), s.activation, s.activation_dropout, training,  // (B, T, D)
                                            s.byte_mask_dropout, fc2->weight, fc2->bias, s.recomputed_feed_forward);
}

// One sub-layer of a block under HF T5Block's names: {`name`: block, layer_norm: RMSNorm}.
std::shared_ptr<torch::nn::Module> block_sub_layer(const char* name, const std::shared_ptr<torch::nn::Module>& block,
                                                   RMSNorm& norm, const ModelConfig& c) {
  auto holder = std::make_shared<torch::nn::Module>();
  holder->register_module(name, block);
  norm = holder->register_module("layer_norm", RMSNorm(c.d_model, c.layer_norm_eps));
  return holder;
}

}  // namespace

TransformerLayerImpl::TransformerLayerImpl(const ModelConfig& c, StackKind kind, bool first)
    : settings_(layer_settings(c)), blocks_(c.module_layout == ModuleLayout::blocks) {
  const bool decoder = kind == StackKind::decoder;
  if (blocks_) {
    const auto heads = decoder ? c.decoder_attention_heads : c.encoder_attention_heads;
    const auto head_dim = decoder ? c.decoder_head_dim() : c.encoder_head_dim();
    const AttentionShape shape{
        c.d_model, heads, head_dim, c.attention_dropout, c.module_layout, c.linear_bias, c.scale_attention_scores};
    layer = register_module("layer", torch::nn::ModuleList());
    self_attn = Attention(shape);
    if (first && c.position_embedding == PositionEmbedding::relative) {
      self_attn->position_bias =
          RelativePositionBias(c.relative_attention_num_buckets, c.relative_attention_max_distance, heads, !decoder);
      self_attn->register_module("relative_attention_bias", self_attn->position_bias->relative_attention_bias);
    }
    layer->push_back(block_sub_layer("SelfAttention", self_attn.ptr(), self_attn_rms, c));
    if (decoder) {
      encoder_attn = Attention(shape);
      layer->push_back(block_sub_layer("EncDecAttention", encoder_attn.ptr(), encoder_attn_rms, c));
    }
    ff = T5FeedForward(c.d_model, decoder ? c.decoder_ffn_dim : c.encoder_ffn_dim, c.gated_ffn);
    layer->push_back(block_sub_layer("DenseReluDense", ff.ptr(), ff_rms, c));
    return;
  }
  const auto heads = decoder ? c.decoder_attention_heads : c.encoder_attention_heads;
  const auto ffn = decoder ? c.decoder_ffn_dim : c.encoder_ffn_dim;
  // Registration order is HF's (the order of named_parameters and of saved checkpoints).
  const AttentionShape shape{c.d_model, heads, 0, c.attention_dropout, c.module_layout, c.attention_bias};
  self_attn = register_module("self_attn", Attention(shape));
  self_attn_layer_norm = register_module("self_attn_layer_norm", make_layer_norm(c));
  if (decoder) {
    encoder_attn = register_module("encoder_attn", Attention(shape));
    encoder_attn_layer_norm = register_module("encoder_attn_layer_norm", make_layer_norm(c));
  }
  fc1 = register_module("fc1", torch::nn::Linear(c.d_model, ffn));
  fc2 = register_module("fc2", torch::nn::Linear(ffn, c.d_model));
  final_layer_norm = register_module("final_layer_norm", make_layer_norm(c));
}

void TransformerLayerImpl::set_kernel_choices(const KernelChoices& kernels) {
  settings_.byte_mask_dropout = kernels.byte_mask_dropout;
  settings_.recomputed_feed_forward = kernels.recomputed_feed_forward;
  self_attn->set_kernel_choices(kernels);
  if (!encoder_attn.is_empty()) encoder_attn->set_kernel_choices(kernels);
  for (auto* norm : {&self_attn_rms, &encoder_attn_rms, &ff_rms}) {
    if (!norm->is_empty()) (*norm)->fused = kernels.fused_rms_norm;
  }
}

torch::Tensor TransformerLayerImpl::forward_block(const torch::Tensor& hidden, const torch::Tensor& self_mask,
                                                  const torch::Tensor& encoder_hidden, const torch::Tensor& cross_mask,
                                                  AttentionCache* self_cache, AttentionCache* cross_cache) {
  // HF T5Block: each sub-layer is hidden + dropout(block(RMSNorm(hidden))); the masks already hold the position bias.
  const bool training = is_training();
  const auto residual = [&](const torch::Tensor& h, const torch::Tensor& block) {
    return h + kernels::dropout(block, settings_.dropout, training, settings_.byte_mask_dropout);
  };
  // Each norm is a temporary of its sub-layer's expression: not held while the next sub-layer runs.
  const auto self_attention = [&](const torch::Tensor& x) {
    return self_cache ? self_attn->forward_self_cached(x, self_mask, *self_cache) : self_attn->forward(x, x, self_mask);
  };
  const auto cross_attention = [&](const torch::Tensor& x) {
    return cross_cache ? encoder_attn->forward_cross_cached(x, encoder_hidden, cross_mask, *cross_cache)
                       : encoder_attn->forward(x, encoder_hidden, cross_mask);
  };
  auto h = residual(hidden, self_attention(self_attn_rms->forward(hidden)));
  if (!encoder_attn.is_empty()) h = residual(h, cross_attention(encoder_attn_rms->forward(h)));
  return residual(h, ff->forward(ff_rms->forward(h), settings_.dropout, training, settings_.byte_mask_dropout));
}

torch::Tensor TransformerLayerImpl::forward(const torch::Tensor& hidden, const torch::Tensor& self_mask,
                                            const torch::Tensor& encoder_hidden, const torch::Tensor& cross_mask,
                                            AttentionCache* self_cache, AttentionCache* cross_cache) {
  if (blocks_) return forward_block(hidden, self_mask, encoder_hidden, cross_mask, self_cache, cross_cache);
  const bool training = is_training();
  auto h = residual_block(hidden, self_attn_layer_norm, settings_, training, [&](const torch::Tensor& x) {
    return self_cache ? self_attn->forward_self_cached(x, self_mask, *self_cache) : self_attn->forward(x, x, self_mask);
  });
  if (!encoder_attn.is_empty()) {
    h = residual_block(h, encoder_attn_layer_norm, settings_, training, [&](const torch::Tensor& x) {
      return cross_cache ? encoder_attn->forward_cross_cached(x, encoder_hidden, cross_mask, *cross_cache)
                         : encoder_attn->forward(x, encoder_hidden, cross_mask);
    });
  }
  return residual_block(h, final_layer_norm, settings_, training,
                        [&](const torch::Tensor& x) { return feed_forward(x, fc1, fc2, settings_, training); });
}

// ---- Stacks (HF PegasusEncoder / PegasusDecoder) ----

namespace {

// An id past the table (ids from the tokenizer of another model) is refused before the lookup, naming the tensor:
// LibTorch's own check says only "index out of range in self".
void check_ids_in_vocabulary(const torch::Tensor& ids, std::int64_t vocab_size, const char* name) {
  if (ids.numel() == 0) return;
  const auto [low_tensor, high_tensor] = torch::aminmax(ids);
  const auto low = low_tensor.item<std::int64_t>();
  const auto high = high_tensor.item<std::int64_t>();
  TORCH_CHECK(low >= 0 && high < vocab_size, name, " holds token id ", low < 0 ? low : high,
              ", outside the model's vocabulary 0..", vocab_size - 1, " (vocab_size ", vocab_size,
              "); encode with the model's own tokenizer");
}

torch::Tensor embed_tokens(const torch::nn::Embedding& table, const torch::Tensor& ids, std::int64_t padding_idx,
                           bool in_place_gradient) {
  // (B, T) -> (B, T, D)
  return in_place_gradient ? kernels::embedding_lookup(table->weight, ids, padding_idx)
                           : torch::embedding(table->weight, ids, padding_idx);
}

}  // namespace

StackImpl::StackImpl(const ModelConfig& c, StackKind kind, torch::nn::Embedding shared)
    : kind_(kind),
      embed_tokens_(std::move(shared)),
      embed_scale_(c.scale_embedding ? std::sqrt(static_cast<double>(c.d_model)) : 1.0),
      dropout_(c.dropout),
      padding_idx_(c.embedding_padding_idx),
      blocks_(c.module_layout == ModuleLayout::blocks),
      relative_positions_(c.position_embedding == PositionEmbedding::relative),
      computed_positions_(c.position_embedding == PositionEmbedding::computed),
      attention_(kind == StackKind::encoder ? c.encoder_attention : EncoderAttention::full),
      block_size_(c.block_size) {
  const auto depth = kind == StackKind::decoder ? c.decoder_layers : c.encoder_layers;
  if (attention_ != EncoderAttention::full) {
    build_long_encoder(c);
    return;
  }
  if (blocks_) {
    // HF T5Stack: embed_tokens (the shared table, not registered again), block, final_layer_norm.
    layers = register_module("block", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < depth; ++i) layers->push_back(TransformerLayer(c, kind, i == 0));
    final_rms = register_module("final_layer_norm", RMSNorm(c.d_model, c.layer_norm_eps));
    return;
  }
  if (!computed_positions_) embed_positions = register_module("embed_positions", PositionalEmbedding(c));
  if (c.layernorm_embedding) {
    layernorm_embedding = register_module("layernorm_embedding", make_layer_norm(c));
  }
  layers = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < depth; ++i) {
    layers->push_back(TransformerLayer(c, kind));
  }
  if (c.final_layer_norm) {
    layer_norm = register_module("layer_norm", make_layer_norm(c));
  }
}

void StackImpl::set_kernel_choices(const KernelChoices& kernels) {
  kernels_ = kernels;
  for (std::size_t i = 0; i < layers->size(); ++i) {
    if (auto* layer = layers[i]->as<TransformerLayer>()) layer->set_kernel_choices(kernels);
    if (auto* layer = layers[i]->as<PegasusXEncoderLayer>()) {
      layer->set_kernel_choices(kernels.byte_mask_dropout, kernels.recomputed_feed_forward,
                                kernels.recomputed_attention_dropout);
    }
    if (auto* block = layers[i]->as<LongT5EncoderBlock>()) {
      block->set_kernel_choices(kernels.byte_mask_dropout, kernels.fused_rms_norm);
    }
  }
  if (!final_rms.is_empty()) final_rms->fused = kernels.fused_rms_norm;
}

torch::Tensor StackImpl::embed(const torch::Tensor& ids, std::int64_t past) {
  // Once per sequence (later decoding steps feed back ids the model chose), unless checked on the host already.
  const char* name = kind_ == StackKind::encoder ? "input_ids" : "decoder_input_ids";
  if (past == 0 && !ids_checked_on_host()) check_ids_in_vocabulary(ids, embed_tokens_->weight.size(0), name);
  auto h = embed_tokens(embed_tokens_, ids, padding_idx_, kernels_.in_place_embedding_gradient);  // (B, T, D)
  if (blocks_) return kernels::dropout(h, dropout_, is_training(), kernels_.byte_mask_dropout);   // T5Stack: no scale
  h = h * embed_scale_;
  h = h + (computed_positions_ ? pegasus_x_positions(ids.size(1), h.size(2), past, h.scalar_type(), h.device())
                               : embed_positions->forward(ids.size(1), past));
  if (!layernorm_embedding.is_empty()) h = layernorm_embedding->forward(h);
  return kernels::dropout(h, dropout_, is_training(), kernels_.byte_mask_dropout);
}

torch::Tensor StackImpl::run_layer(std::size_t i, const torch::Tensor& hidden, const torch::Tensor& self_mask,
                                   const torch::Tensor& encoder_hidden, const torch::Tensor& cross_mask,
                                   DecoderCache* cache) {
  auto layer = layers[i]->as<TransformerLayer>();
  if (cache) {
    return layer->forward(hidden, self_mask, encoder_hidden, cross_mask, &cache->self_attention[i],
                          &cache->cross_attention[i]);
  }
  const bool cross = encoder_hidden.defined();
  if (is_training() && static_cast<std::int64_t>(i) < checkpointed_layers_) {
    // The encoder states are an input of a decoder block: their gradient flows back through the recompute. So is
    // a self-attention mask carrying the trained relative position bias.
    TensorList inputs{hidden};
    if (cross) inputs.push_back(encoder_hidden);
    const bool mask_is_input = self_mask.defined() && self_mask.requires_grad();
    if (mask_is_input) inputs.push_back(self_mask);
    return checkpoint(
        [layer, self_mask, cross_mask, cross, mask_is_input](const TensorList& in) {
          const auto& mask = mask_is_input ? in.back() : self_mask;
          return TensorList{layer->forward(in[0], mask, cross ? in[1] : torch::Tensor(), cross_mask)};
        },
        inputs)[0];
  }
  // Through a view of its own, a decoder layer's key and value gradients of the encoder states are summed before
  // they join the other layers', as in the checkpointed branch: both runs round identically.
  return layer->forward(hidden, self_mask, cross ? encoder_hidden.view_as(encoder_hidden) : encoder_hidden, cross_mask);
}

torch::Tensor StackImpl::with_position_bias(const torch::Tensor& mask, std::int64_t length, std::int64_t past) {
  if (!relative_positions_) return mask;
  auto bias = layers[0]->as<TransformerLayer>()->self_attn->position_bias->forward(length, past);  // (1, H, T, K)
  return mask.defined() ? bias + mask : bias;
}

torch::Tensor StackImpl::finish(const torch::Tensor& hidden) {
  if (blocks_) return kernels::dropout(final_rms->forward(hidden), dropout_, is_training(), kernels_.byte_mask_dropout);
  return layer_norm.is_empty() ? hidden : layer_norm->forward(hidden);
}

torch::Tensor StackImpl::encode(const torch::Tensor& input_ids, const torch::Tensor& mask) {
  TORCH_CHECK(kind_ == StackKind::encoder, "encode() called on a decoder stack");
  auto h = embed(input_ids, 0);  // (B, S, D)
  const auto self_mask = with_position_bias(mask, input_ids.size(1), 0);
  for (std::size_t i = 0; i < layers->size(); ++i) h = run_layer(i, h, self_mask, {}, {}, nullptr);
  return finish(h);
}

torch::Tensor StackImpl::decode(const torch::Tensor& decoder_input_ids, const torch::Tensor& encoder_hidden,
                                const torch::Tensor& cross_mask, DecoderCache* cache) {
  TORCH_CHECK(kind_ == StackKind::decoder, "decode() called on an encoder stack");
  const auto length = decoder_input_ids.size(1);
  const std::int64_t past = cache ? cache->length : 0;
  auto h = embed(decoder_input_ids, past);  // (B, T, D)
  // A single new position may see every cached one: no mask needed.
  torch::Tensor self_mask;
  if (length > 1) self_mask = causal_mask(length, past, h.scalar_type(), h.device());
  self_mask = with_position_bias(self_mask, length, past);
  for (std::size_t i = 0; i < layers->size(); ++i) h = run_layer(i, h, self_mask, encoder_hidden, cross_mask, cache);
  if (cache) cache->length += length;
  return finish(h);
}

Seq2SeqModelImpl::Seq2SeqModelImpl(const ModelConfig& c) {
  shared = register_module("shared", torch::nn::Embedding(c.vocab_size, c.d_model));
  encoder = register_module("encoder", Stack(c, StackKind::encoder, shared));
  decoder = register_module("decoder", Stack(c, StackKind::decoder, shared));
}

// ---- The conditional-generation model (HF PegasusForConditionalGeneration) ----

Seq2SeqLMImpl::Seq2SeqLMImpl(ModelConfig config) : config_(std::move(config)) {
  config_.validate();
  if (config_.module_layout == ModuleLayout::blocks) {
    // T5ForConditionalGeneration: shared, encoder, decoder (and lm_head) at the top level, no final_logits_bias.
    model = Seq2SeqModel(config_);
    register_module("shared", model->shared);
    register_module("encoder", model->encoder);
    register_module("decoder", model->decoder);
  } else {
    model = register_module("model", Seq2SeqModel(config_));
  }
  if (!config_.tie_word_embeddings) {
    lm_head = register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(config_.d_model, config_.vocab_size).bias(false)));
  }
  if (config_.has_final_logits_bias) {
    final_logits_bias = register_buffer("final_logits_bias", torch::zeros({1, config_.vocab_size}));
  }
}

torch::Tensor Seq2SeqLMImpl::encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  if (config_.encoder_attention != EncoderAttention::full) return model->encoder->encode_long(input_ids, attention_mask);
  auto mask = padding_mask(attention_mask, model->shared->weight.scalar_type());
  return model->encoder->encode(input_ids, mask);
}

torch::Tensor Seq2SeqLMImpl::decode(const torch::Tensor& decoder_input_ids, const torch::Tensor& encoder_hidden,
                                    const torch::Tensor& attention_mask, DecoderCache* cache) {
  auto mask = padding_mask(attention_mask, encoder_hidden.scalar_type());
  return model->decoder->decode(decoder_input_ids, encoder_hidden, mask, cache);
}

torch::Tensor Seq2SeqLMImpl::lm_head_weight() const {
  return config_.tie_word_embeddings ? model->shared->weight : lm_head->weight;
}

torch::Tensor Seq2SeqLMImpl::head_input(const torch::Tensor& decoder_hidden) const {
  if (!config_.scale_decoder_outputs) return decoder_hidden;
  return decoder_hidden * std::pow(static_cast<double>(config_.d_model), -0.5);
}

torch::Tensor Seq2SeqLMImpl::lm_logits(const torch::Tensor& decoder_hidden) {
  // (B, T, D) x (V, D)^T + (1, V) -> (B, T, V)
  // Evaluating a few rows, the few-rows kernel; else at::linear: under autocast it casts the weight to bfloat16 once
  // per region and keeps the copy (evaluation_memory.h counts it), where the modules' linear casts it at every call.
  const auto x = head_input(decoder_hidden);
  const auto weight = lm_head_weight();
  auto logits = !is_training() && kernels::few_rows_kernel_applies(x, weight, at::Tensor())
                    ? kernels::linear(x, weight, at::Tensor(), /*training=*/false)
                    : torch::linear(x, weight);
  return final_logits_bias.defined() ? logits + final_logits_bias : logits;
}

kernels::TokenLoss Seq2SeqLMImpl::token_loss(const torch::Tensor& decoder_hidden, const torch::Tensor& labels,
                                             double label_smoothing, const kernels::KnownLabels* known) {
  kernels::LinearCrossEntropyOptions options;
  options.label_smoothing = label_smoothing;
  options.known = known;
  return kernels::linear_cross_entropy(head_input(decoder_hidden), lm_head_weight(), final_logits_bias, labels,
                                       options);
}

void Seq2SeqLMImpl::set_kernel_choices(const KernelChoices& kernels) {
  kernels_ = kernels;
  model->encoder->set_kernel_choices(kernels);
  model->decoder->set_kernel_choices(kernels);
}

torch::Tensor Seq2SeqLMImpl::shift_tokens_right(const torch::Tensor& labels) const {
  auto shifted = torch::empty_like(labels);
  shifted.narrow(1, 1, labels.size(1) - 1).copy_(labels.narrow(1, 0, labels.size(1) - 1));
  shifted.select(1, 0).fill_(config_.decoder_start_token_id);
  return shifted.masked_fill_(shifted == -100, config_.pad_token_id);
}

Seq2SeqOutput Seq2SeqLMImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                     const torch::Tensor& labels) {
  Seq2SeqOutput out;
  out.encoder_hidden_state = encode(input_ids, attention_mask);
  auto hidden = decode(shift_tokens_right(labels), out.encoder_hidden_state, attention_mask);
  out.logits = lm_logits(hidden);
  out.loss = kernels::label_cross_entropy(out.logits, labels);
  return out;
}

void Seq2SeqLMImpl::set_gradient_checkpointing(std::int64_t encoder_layers, std::int64_t decoder_layers) {
  TORCH_CHECK(encoder_layers >= 0 && decoder_layers >= 0, "checkpointed layer counts must not be negative");
  model->encoder->set_checkpointed_layers(encoder_layers);
  model->decoder->set_checkpointed_layers(decoder_layers);
}

DecoderCache Seq2SeqLMImpl::new_cache() const {
  DecoderCache cache;
  cache.self_attention.resize(config_.decoder_layers);
  cache.cross_attention.resize(config_.decoder_layers);
  return cache;
}

std::vector<std::string> trainable_parameter_names(Seq2SeqLMImpl& model) {
  std::vector<std::string> names;
  for (const auto& item : model.named_parameters()) {
    if (item.value().requires_grad()) {
      names.push_back(item.key());
    }
  }
  return names;
}

}  // namespace fitsum::model
