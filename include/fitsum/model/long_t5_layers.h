// The pieces LongT5's encoder adds to T5 v1.1 (model/t5_layers.h), each matching transformers' modeling_longt5.py
// (4.47; 5.x computes the same):
//   - Block helpers: split_into_blocks, concatenate_3_blocks and long_t5_local_mask (_split_into_blocks,
//     _concatenate_3_blocks, _get_local_attention_mask: the sequence padded with zeros to a multiple of the block
//     length, each block's keys the previous, own and next block, a key allowed when both positions are real and
//     less than a block length apart); global_fixed_block_ids and global_aggregates (_make_global_fixed_block_ids,
//     _create_global_aggregates: each real token's global block, orphan tokens after the last full block joined to
//     it, and the sums of each block's states).
//   - LongT5LocalAttention: every position attends to the 3 blocks around its own (block_len = local_radius + 1),
//     with a relative position bias over that window (relative_attention_bias, first layer only), unscaled scores.
//   - LongT5TransientGlobalAttention: the same plus side keys and values made from the RMS-normalized
//     (global_input_layer_norm) sums of every global_block_size tokens, with their own bias
//     (global_relative_attention_bias, first layer only) over the distance between global blocks.
//   - LongT5EncoderBlock: LongT5Block of the encoder: {attention, layer_norm} then {DenseReluDense, layer_norm}, each
//     hidden + dropout(sub-layer(RMSNorm(hidden))). The first block's attention returns its position bias with the
//     masks folded in (-1e10 where attending is not allowed), and every later block uses that tensor as it is
//     (HF's LongT5Stack passes position_bias down): run_long_t5_blocks does what the stack does.
// Module names are the checkpoint's (layer.0.LocalSelfAttention.{q,k,v,o,relative_attention_bias},
// layer.0.TransientGlobalSelfAttention.{..., global_relative_attention_bias, global_input_layer_norm},
// layer.0.layer_norm, layer.1.DenseReluDense.{wi_0,wi_1,wo} or .wi, layer.1.layer_norm), registered in HF's order.
#pragma once

#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "fitsum/model/t5_layers.h"

namespace fitsum::model {

// config.encoder_attention_type: "local" or "transient-global".
enum class LongT5AttentionType { local, transient_global };

struct LongT5LayerOptions {
  std::int64_t d_model = 0;
  std::int64_t d_kv = 64;  // per head; q, k, v are heads * d_kv wide
  std::int64_t heads = 1;
  std::int64_t d_ff = 0;
  bool gated_ffn = true;            // feed_forward_proj "gated-gelu" (wi_0, wi_1, gelu_new); false: "relu" (wi)
  std::int64_t local_radius = 127;  // block_len = local_radius + 1
  std::int64_t global_block_size = 16;
  std::int64_t num_buckets = 32;    // relative_attention_num_buckets
  std::int64_t max_distance = 128;  // relative_attention_max_distance
  double layer_norm_eps = 1e-6;
  double dropout = 0.0;  // dropout_rate: attention probabilities, sub-layer outputs, feed-forward
  LongT5AttentionType attention_type = LongT5AttentionType::local;
  bool has_relative_attention_bias = false;  // the first block of the encoder
  bool byte_mask_dropout = true;             // KernelChoices::byte_mask_dropout; off: torch::dropout
};

// x with `dim` of length S  ->  `dim` replaced by (N, block_len), N = ceil(S / block_len), zeros after the S entries.
torch::Tensor split_into_blocks(const torch::Tensor& x, std::int64_t block_len, std::int64_t dim);
// x with N blocks along block_dim  ->  for each block, the previous, own and next block concatenated along
// sequence_dim (zero blocks before the first and after the last).
torch::Tensor concatenate_3_blocks(const torch::Tensor& x, std::int64_t block_dim, std::int64_t sequence_dim);
// attention_mask (B, S) of 0/1  ->  bool (B, 1, N, block_len, 3 * block_len): query i of block n may attend key j of
// its 3-block window.
torch::Tensor long_t5_local_mask(const torch::Tensor& attention_mask, std::int64_t block_len);

struct GlobalBlockIds {
  torch::Tensor block_ids;    // (B, S) int64: each token's global block, -1 for padding
  torch::Tensor segment_ids;  // (B, G) int64, G = S / global_block_size: 1 for a block holding real tokens, else 0
};
// attention_mask (B, S) of 0/1, computed with HF's float32 operations (so a global_block_size whose reciprocal is
// not exact in binary rounds as it does there).
GlobalBlockIds global_fixed_block_ids(const torch::Tensor& attention_mask, std::int64_t global_block_size);
// hidden (B, S, D), block_ids (B, S)  ->  (B, G, D): the sum of each global block's states (padding in none).
torch::Tensor global_aggregates(const torch::Tensor& hidden, const torch::Tensor& block_ids, std::int64_t global_len);

// An attention's (or a block's) output and the position bias it used: the first block's, masks included, is what
// every later block of the stack receives.
struct LongT5Attended {
  torch::Tensor hidden;         // (B, S, D)
  torch::Tensor position_bias;  // (B, N, heads, block_len, 3 * block_len [+ G])
};

class LongT5LocalAttentionImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument for heads, d_kv or d_model below 1, or a negative local_radius.
  explicit LongT5LocalAttentionImpl(const LongT5LayerOptions& options);
  // hidden (B, S, D), attention_mask (B, S) of 0/1; position_bias undefined in the first block (computed here from
  // relative_attention_bias and the mask), the first block's afterwards.
  LongT5Attended forward(const torch::Tensor& hidden, const torch::Tensor& attention_mask,
                         const torch::Tensor& position_bias = {});
  const LongT5LayerOptions& options() const { return options_; }
  void set_byte_mask_dropout(bool on) { options_.byte_mask_dropout = on; }

  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  torch::nn::Embedding relative_attention_bias{nullptr};  // (num_buckets, heads), first block only

 private:
  LongT5LayerOptions options_;
};
TORCH_MODULE(LongT5LocalAttention);

class LongT5TransientGlobalAttentionImpl : public torch::nn::Module {
 public:
  // Throws as LongT5LocalAttention does, and for a global_block_size below 1.
  explicit LongT5TransientGlobalAttentionImpl(const LongT5LayerOptions& options);
  // As LongT5LocalAttention::forward; the position bias also holds the side (global) keys' bias and mask.
  LongT5Attended forward(const torch::Tensor& hidden, const torch::Tensor& attention_mask,
                         const torch::Tensor& position_bias = {});
  const LongT5LayerOptions& options() const { return options_; }
  void set_byte_mask_dropout(bool on) { options_.byte_mask_dropout = on; }

  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  torch::nn::Embedding relative_attention_bias{nullptr};         // first block only
  torch::nn::Embedding global_relative_attention_bias{nullptr};  // first block only
  RMSNorm global_input_layer_norm{nullptr};

 private:
  // The first block's bias: the local window's (masked) and the side keys' (masked)  ->  (B, N, H, K, 3K + G).
  torch::Tensor first_position_bias(const torch::Tensor& attention_mask, const GlobalBlockIds& ids);

  LongT5LayerOptions options_;
};
TORCH_MODULE(LongT5TransientGlobalAttention);

class LongT5EncoderBlockImpl : public torch::nn::Module {
 public:
  explicit LongT5EncoderBlockImpl(const LongT5LayerOptions& options);
  // hidden (B, S, D), attention_mask (B, S) of 0/1, position_bias as the attention takes it  ->  the next states and
  // the position bias for the next block.
  LongT5Attended forward(const torch::Tensor& hidden, const torch::Tensor& attention_mask,
                         const torch::Tensor& position_bias = {});
  const LongT5LayerOptions& options() const { return options_; }
  // The model's KernelChoices (seq2seq.h) that apply here: fitsum's dropout and the fused RMSNorms.
  void set_kernel_choices(bool byte_mask_dropout, bool fused_rms_norm);

  torch::nn::ModuleList layer{nullptr};           // {LocalSelfAttention or TransientGlobalSelfAttention, layer_norm},
                                                  // {DenseReluDense, layer_norm}
  LongT5LocalAttention local_attention{nullptr};  // "LocalSelfAttention", local blocks
  LongT5TransientGlobalAttention global_attention{nullptr};  // "TransientGlobalSelfAttention"
  RMSNorm attention_norm{nullptr}, ff_norm{nullptr};
  T5FeedForward ff{nullptr};

 private:
  LongT5LayerOptions options_;
};
TORCH_MODULE(LongT5EncoderBlock);

// HF LongT5Stack's loop over the encoder blocks: the first block computes the position bias, each later one reuses
// it. hidden (B, S, D) after the embedding dropout  ->  the last block's states (before final_layer_norm).
torch::Tensor run_long_t5_blocks(const torch::nn::ModuleList& blocks, const torch::Tensor& hidden,
                                 const torch::Tensor& attention_mask);

}  // namespace fitsum::model
