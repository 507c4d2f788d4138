// One encoder-decoder transformer for conditional generation, switched by ModelConfig (model/config.h).
// Matches Hugging Face's PegasusForConditionalGeneration (and, through the config switches, the BART layout):
// module and parameter names equal the HF checkpoint keys, so `named_parameters()` plus `named_buffers()` is the
// checkpoint map ("model.encoder.layers.0.self_attn.q_proj.weight", "final_logits_bias", ...).
//
// The model knows nothing of files, flags or tokenizers: token ids in; encoder states, decoder states, logits and
// the loss out. `encode` and `decode` are separate so that generation runs the encoder once and decodes
// incrementally with a key/value cache (DecoderCache).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "fitsum/kernels/loss.h"
#include "fitsum/model/config.h"
#include "fitsum/model/decoder_cache.h"
#include "fitsum/model/t5_layers.h"

namespace fitsum::model {

// Additive attention masks, as HF builds them: 0 where attending is allowed, the dtype's lowest finite value
// where it is not (so a fully padded row never produces NaN).
double padding_mask_value(torch::ScalarType dtype);  // that lowest finite value (float32 or bfloat16)
// attention_mask (B, S) of 0/1  ->  (B, 1, 1, S)
torch::Tensor padding_mask(const torch::Tensor& attention_mask, torch::ScalarType dtype);
// Query i (at absolute position past_length + i) may see keys 0 .. past_length + i  ->  (1, 1, T, past_length + T)
torch::Tensor causal_mask(std::int64_t query_length, std::int64_t past_length, torch::ScalarType dtype,
                          torch::Device device);

// The sinusoidal table of PEGASUS (HF PegasusSinusoidalPositionalEmbedding): computed in double precision,
// sin(pos / 10000^(2j/dim)) in the first half of the features and the matching cos in the second.  (n, dim)
torch::Tensor sinusoidal_table(std::int64_t positions, std::int64_t dim);

// How the model computes, not what: each choice has a plain LibTorch alternative with the same results up to float
// rounding (dropout draws other, equally distributed masks). All on by default; turning one off is for
// before/after measurements (`fitsum bench train --unfused`) and tests.
struct KernelChoices {
  bool in_place_embedding_gradient = true;  // lookups add into model.shared.weight's .grad (kernels/tied_embedding.h)
  bool byte_mask_dropout = true;            // fitsum's CPU dropout keeping uint8 masks (kernels/dropout.h)
  bool fused_rms_norm = true;               // T5's RMSNorm as one autograd node (model/t5_layers.h)
  bool recomputed_feed_forward = true;      // fc2's input recomputed in backward (kernels/feed_forward.h)
  bool recomputed_attention_dropout = true;  // PEGASUS-X: probabilities, dropout recomputed (kernels/attention_dropout.h)
};

// PEGASUS's and BART's attention (the layers layout: q_proj, k_proj, v_proj, out_proj with biases; queries scaled by
// head_dim^-0.5), or T5's (the blocks layout: q, k, v, o without biases, unscaled scores, heads x d_kv wide inside).
struct AttentionShape {
  std::int64_t d_model = 0;
  std::int64_t heads = 1;
  std::int64_t head_dim = 0;  // 0: d_model / heads
  double dropout = 0.0;
  ModuleLayout layout = ModuleLayout::layers;  // the projections' names and registration order
  bool bias = true;                            // ModelConfig::linear_bias (blocks), attention_bias (layers)
  bool scale_scores = true;                    // ModelConfig::scale_attention_scores
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(std::int64_t d_model, std::int64_t heads, double dropout);
  explicit AttentionImpl(const AttentionShape& shape);

  // x (B, T, D) attends over kv (B, S, D); mask is additive, broadcastable to (B, heads, T, S), or undefined.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& kv, const torch::Tensor& mask);
  // Self-attention over the cache plus x: appends x's keys/values to `cache`.
  torch::Tensor forward_self_cached(const torch::Tensor& x, const torch::Tensor& mask, AttentionCache& cache);
  // Cross-attention: fills `cache` from `kv` on the first call, reuses it afterwards. x has cache.group rows per
  // row of kv and of mask.
  torch::Tensor forward_cross_cached(const torch::Tensor& x, const torch::Tensor& kv, const torch::Tensor& mask,
                                     AttentionCache& cache);

  void set_kernel_choices(const KernelChoices& kernels) { byte_mask_dropout_ = kernels.byte_mask_dropout; }

  torch::nn::Linear k_proj{nullptr}, v_proj{nullptr}, q_proj{nullptr}, out_proj{nullptr};  // blocks: k, v, q, o
  // Relative positions: the first layer's self-attention of each stack owns the relative position bias (registered
  // under it as relative_attention_bias); the stack adds it to every layer's mask.
  RelativePositionBias position_bias{nullptr};

 private:
  torch::Tensor split_heads(const torch::Tensor& x) const;  // (B, T, D) -> (B, heads, T, head_dim)
  // x has `group` rows per row of key, value and mask (AttentionCache::group).
  torch::Tensor attend(const torch::Tensor& x, const torch::Tensor& key, const torch::Tensor& value,
                       const torch::Tensor& mask, std::int64_t group = 1);

  std::int64_t heads_;
  std::int64_t head_dim_;
  double scaling_;
  double dropout_;
  bool byte_mask_dropout_ = true;
};
TORCH_MODULE(Attention);

// The activation and dropout settings of one stack's layers.
struct LayerSettings {
  Activation activation = Activation::relu;
  double dropout = 0.0;
  double activation_dropout = 0.0;
  bool normalize_before = true;
  bool byte_mask_dropout = true;  // KernelChoices
  bool recomputed_feed_forward = true;
};

// Which stack a layer or stack belongs to: decoder layers add cross-attention over the encoder states and their
// self-attention is causal.
enum class StackKind { encoder, decoder };

// One transformer layer (HF PegasusEncoderLayer / PegasusDecoderLayer): self-attention, then (decoder layers only)
// cross-attention over the encoder states, then the feed-forward block; each a residual block around a LayerNorm
// (before the block for pre-LN, after the sum for post-LN).
class TransformerLayerImpl : public torch::nn::Module {
 public:
  // `first`: the first layer of a stack, whose self-attention owns the stack's relative position bias (if any).
  TransformerLayerImpl(const ModelConfig& config, StackKind kind, bool first = false);
  // hidden (B, T, D), self_mask additive, broadcastable to (B, 1, T, T'), or undefined -> (B, T, D).
  // Decoder layers also take encoder_hidden (B, S, D) and cross_mask (B, 1, 1, S); with caches, T' = cached
  // positions + T and the caches are updated.
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& self_mask,
                        const torch::Tensor& encoder_hidden = {}, const torch::Tensor& cross_mask = {},
                        AttentionCache* self_cache = nullptr, AttentionCache* cross_cache = nullptr);
  void set_kernel_choices(const KernelChoices& kernels);

  Attention self_attn{nullptr};
  torch::nn::LayerNorm self_attn_layer_norm{nullptr};
  Attention encoder_attn{nullptr};  // decoder layers only
  torch::nn::LayerNorm encoder_attn_layer_norm{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::LayerNorm final_layer_norm{nullptr};
  // The blocks layout (HF T5Block): `layer` holds the sub-layers T5LayerSelfAttention {SelfAttention, layer_norm},
  // T5LayerCrossAttention {EncDecAttention, layer_norm} (decoder) and T5LayerFF {DenseReluDense, layer_norm};
  // self_attn and encoder_attn point into it, the norms are RMSNorms.
  torch::nn::ModuleList layer{nullptr};
  RMSNorm self_attn_rms{nullptr}, encoder_attn_rms{nullptr}, ff_rms{nullptr};
  T5FeedForward ff{nullptr};

 private:
  torch::Tensor forward_block(const torch::Tensor& hidden, const torch::Tensor& self_mask,
                              const torch::Tensor& encoder_hidden, const torch::Tensor& cross_mask,
                              AttentionCache* self_cache, AttentionCache* cross_cache);

  LayerSettings settings_;
  bool blocks_ = false;  // ModuleLayout::blocks
};
TORCH_MODULE(TransformerLayer);

// Position embeddings of one stack. Sinusoidal tables are buffers (kept in checkpoints, never trained); learned
// tables are parameters. Either way the tensor is called "weight", as in HF.
class PositionalEmbeddingImpl : public torch::nn::Module {
 public:
  PositionalEmbeddingImpl(const ModelConfig& config);
  // Embeddings of positions past_length .. past_length + length - 1  ->  (length, D)
  torch::Tensor forward(std::int64_t length, std::int64_t past_length = 0);
  torch::Tensor weight;

 private:
  std::int64_t offset_;
  std::int64_t max_positions_;
};
TORCH_MODULE(PositionalEmbedding);

// One stack of layers (HF PegasusEncoder / PegasusDecoder): token embedding (scaled), positions, optional
// layernorm_embedding, dropout, the layers (optionally checkpointed), optional final LayerNorm.
class StackImpl : public torch::nn::Module {
 public:
  // `shared` is the token embedding owned by the parent (model.shared); it is registered there only, as HF's
  // state dict keeps it once.
  StackImpl(const ModelConfig& config, StackKind kind, torch::nn::Embedding shared);
  // Encoder: input_ids (B, S), mask (B, 1, 1, S) -> (B, S, D)
  torch::Tensor encode(const torch::Tensor& input_ids, const torch::Tensor& mask);
  // The long-input encoders (ModelConfig::encoder_attention other than full; long_encoder_stack.cpp), which build
  // their masks from the 0/1 attention_mask (B, S)  ->  (B, S, D). PEGASUS-X (HF PegasusXEncoder): the states padded
  // to whole blocks, the global tokens beside them through every layer, cut back and normalized. LongT5 (HF
  // LongT5Stack): the first block's position bias, masks folded in, passed to every later block.
  torch::Tensor encode_long(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);
  // Decoder: decoder_input_ids (B, T), encoder_hidden (B, S, D), cross_mask (B, 1, 1, S) -> (B, T, D).
  // With a cache, decoder_input_ids hold only the new positions, and encoder_hidden and cross_mask one row per
  // cache->rows_per_source decoder rows.
  torch::Tensor decode(const torch::Tensor& decoder_input_ids, const torch::Tensor& encoder_hidden,
                       const torch::Tensor& cross_mask, DecoderCache* cache = nullptr);
  // While training, the first `layers` layers keep only their inputs and recompute the rest in backward.
  void set_checkpointed_layers(std::int64_t layers) { checkpointed_layers_ = layers; }
  void set_kernel_choices(const KernelChoices& kernels);
  StackKind kind() const { return kind_; }

  PositionalEmbedding embed_positions{nullptr};  // a stored table (not for relative or computed positions)
  torch::nn::Embedding embed_global{nullptr};     // PEGASUS-X's encoder: the global tokens' first states
  torch::nn::LayerNorm layernorm_embedding{nullptr};
  // TransformerLayer, or the long-input encoders' PegasusXEncoderLayer / LongT5EncoderBlock; the blocks layout
  // registers it as "block"
  torch::nn::ModuleList layers;
  torch::nn::LayerNorm layer_norm{nullptr};
  RMSNorm final_rms{nullptr};  // blocks layout: "final_layer_norm"

 private:
  // ids (B, T) at positions past .. past + T - 1 -> (B, T, D), before the first layer.
  torch::Tensor embed(const torch::Tensor& ids, std::int64_t past);
  // Layer i, checkpointed while training when i < checkpointed_layers_ (never with a cache).
  torch::Tensor run_layer(std::size_t i, const torch::Tensor& hidden, const torch::Tensor& self_mask,
                          const torch::Tensor& encoder_hidden, const torch::Tensor& cross_mask, DecoderCache* cache);
  // Relative positions: their bias for `length` queries after `past` positions added to `mask` (which may be
  // undefined)  ->  (B or 1, heads, length, past + length). Positions from a table: `mask` as it is.
  torch::Tensor with_position_bias(const torch::Tensor& mask, std::int64_t length, std::int64_t past);
  // The stack's last step: the final LayerNorm (PEGASUS), RMSNorm and dropout (the blocks layout), or nothing (BART).
  torch::Tensor finish(const torch::Tensor& hidden);
  // The long-input encoders' modules, registered in HF's order (long_encoder_stack.cpp).
  void build_long_encoder(const ModelConfig& config);
  torch::Tensor encode_global_local(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);
  torch::Tensor encode_local(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);

  StackKind kind_;
  torch::nn::Embedding embed_tokens_;
  double embed_scale_;
  double dropout_;
  std::int64_t padding_idx_;
  std::int64_t checkpointed_layers_ = 0;
  KernelChoices kernels_;
  bool blocks_ = false;              // ModuleLayout::blocks
  bool relative_positions_ = false;  // PositionEmbedding::relative
  bool computed_positions_ = false;  // PositionEmbedding::computed
  EncoderAttention attention_ = EncoderAttention::full;  // the encoder's; full in a decoder
  std::int64_t block_size_ = 0;                          // global_local
};
TORCH_MODULE(Stack);

// HF's `model` submodule: the shared token embedding and the two stacks. (The blocks layout has no `model`: Seq2SeqLM
// registers these three at its top level, as T5ForConditionalGeneration does.)
class Seq2SeqModelImpl : public torch::nn::Module {
 public:
  explicit Seq2SeqModelImpl(const ModelConfig& config);
  torch::nn::Embedding shared{nullptr};
  Stack encoder{nullptr};
  Stack decoder{nullptr};
};
TORCH_MODULE(Seq2SeqModel);

struct Seq2SeqOutput {
  torch::Tensor loss;                  // () mean cross-entropy over label tokens that are not -100
  torch::Tensor logits;                // (B, T, V)
  torch::Tensor encoder_hidden_state;  // (B, S, D)
};

class Seq2SeqLMImpl : public torch::nn::Module {
 public:
  explicit Seq2SeqLMImpl(ModelConfig config);

  const ModelConfig& config() const { return config_; }

  // input_ids (B, S), attention_mask (B, S) -> encoder states (B, S, D)
  torch::Tensor encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);
  // decoder_input_ids (B, T) -> decoder states (B, T, D) after the final LayerNorm. With a cache, encoder_hidden
  // and attention_mask have one row per cache->rows_per_source decoder rows.
  torch::Tensor decode(const torch::Tensor& decoder_input_ids, const torch::Tensor& encoder_hidden,
                       const torch::Tensor& attention_mask, DecoderCache* cache = nullptr);
  // decoder states (B, T, D) -> logits (B, T, V): the tied (or separate) LM head plus final_logits_bias.
  torch::Tensor lm_logits(const torch::Tensor& decoder_hidden);
  // The summed token loss of decoder states (B, T, D) against labels (B, T): label_loss_sum(lm_logits(hidden),
  // labels, label_smoothing) computed by the fused LM head + cross-entropy (kernels/loss.h), which never holds the
  // (B, T, V) logits. What training uses; lm_logits is for generation. `known`: what the host found in the labels
  // (kernels/loss.h), so that nothing is read back from the device.
  kernels::TokenLoss token_loss(const torch::Tensor& decoder_hidden, const torch::Tensor& labels,
                                double label_smoothing = 0.0, const kernels::KnownLabels* known = nullptr);
  // Full pass with teacher forcing: decoder inputs are labels shifted right (HF shift_tokens_right).
  Seq2SeqOutput forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                        const torch::Tensor& labels);

  // labels (B, T) -> decoder inputs (B, T): decoder_start_token_id first, -100 replaced by pad.
  torch::Tensor shift_tokens_right(const torch::Tensor& labels) const;
  // A cache sized for this decoder.
  DecoderCache new_cache() const;
  // Activation checkpointing (HF gradient_checkpointing): the first `encoder_layers` / `decoder_layers` layers of
  // each stack recompute their activations in backward instead of keeping them. 0 turns it off; values beyond the
  // stack's depth mean every layer.
  void set_gradient_checkpointing(std::int64_t encoder_layers, std::int64_t decoder_layers);
  // The LM head's weight: model.shared.weight when tied.
  torch::Tensor lm_head_weight() const;
  void set_kernel_choices(const KernelChoices& kernels);
  const KernelChoices& kernel_choices() const { return kernels_; }

  Seq2SeqModel model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // registered only when tie_word_embeddings is false
  torch::Tensor final_logits_bias;     // buffer (1, V), as in HF; undefined for T5, which has none

 private:
  // What the head multiplies: the decoder states, times d_model^-0.5 for T5 v1.0's tied head.
  torch::Tensor head_input(const torch::Tensor& decoder_hidden) const;

  ModelConfig config_;
  KernelChoices kernels_;
};
TORCH_MODULE(Seq2SeqLM);

// HF's _init_weights for these models: normal(0, init_std) for Linear and Embedding weights, zero biases and the
// padding row, LayerNorm at (1, 0), sinusoidal tables recomputed, final_logits_bias zero; for T5 its
// initializer_factor-scaled normals (T5PreTrainedModel._init_weights) and RMSNorm weights at 1. Deterministic in
// `seed`.
void init_weights(Seq2SeqLMImpl& model, std::uint64_t seed);

// Names of the tensors the optimizer updates (parameters), in registration order.
std::vector<std::string> trainable_parameter_names(Seq2SeqLMImpl& model);

}  // namespace fitsum::model
