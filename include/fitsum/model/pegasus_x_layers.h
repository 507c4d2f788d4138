// The pieces PEGASUS-X's encoder adds to a PEGASUS-style transformer, each matching transformers'
// modeling_pegasus_x.py (4.47; 5.x computes the same):
//   - pegasus_x_positions: PegasusXSinusoidalPositionalEmbedding, computed on the fly in the embeddings' dtype
//     (sin in the first half of the features, cos in the second, frequencies 10000^(-j / (half - 1))).
//   - pad_to_blocks: what PegasusXEncoder.forward does before its first layer: the 0/1 attention mask made additive,
//     and the states and mask padded at the end to a multiple of block_size.
//   - global_token_states: the global tokens' first states, embed_global's rows 0 .. G-1 for every batch row.
//   - PegasusXGlobalLocalAttention: block-local attention with global tokens. Each token attends to the global
//     tokens and to the tokens of its own block; each global token attends to the global tokens and to every token.
//     Both use the same q/k/v/out projections, without biases.
//   - PegasusXEncoderLayer: pre-LayerNorm (self_attn_layer_norm for the tokens, global_self_attn_layer_norm for the
//     global tokens), the attention, then the feed-forward block (fc1, fc2, final_layer_norm) shared by tokens and
//     global tokens. A staggered layer pads half a block of masked zeros at both ends before attending, which shifts
//     the block boundaries by half a block, and cuts them off afterwards.
// Module names are the checkpoint's (self_attn.{k,v,q,out}_proj, self_attn_layer_norm, global_self_attn_layer_norm,
// fc1, fc2, final_layer_norm, embed_global), registered in HF's order.
#pragma once

#include <cstdint>
#include <utility>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "fitsum/model/config.h"

namespace fitsum::model {

// Positions past_length .. past_length + length - 1 of a width-`dim` table  ->  (length, dim) in `dtype`, with
// HF's operations in HF's order (the table is computed in the embeddings' dtype, not in double). `dim` must be even
// and at least 4 (HF's formula divides by dim / 2 - 1 and fills two equal halves).
torch::Tensor pegasus_x_positions(std::int64_t length, std::int64_t dim, std::int64_t past_length,
                                  torch::ScalarType dtype, torch::Device device);

// HF's layer-to-layer states of the encoder: token states and the global tokens' states.
struct PegasusXStates {
  torch::Tensor hidden;  // (B, P, D), P a multiple of block_size
  torch::Tensor global;  // (B, G, D)
};

struct BlockPadded {
  torch::Tensor hidden;  // (B, P, D): zeros after the S input positions
  torch::Tensor mask;    // (B, P) additive: 0 where attending is allowed, the dtype's lowest value elsewhere
};
// hidden (B, S, D), attention_mask (B, S) of 0/1  ->  P = S rounded up to a multiple of block_size.
BlockPadded pad_to_blocks(const torch::Tensor& hidden, const torch::Tensor& attention_mask, std::int64_t block_size);

// embed_global.weight (G, D)  ->  (batch, G, D): the lookup of ids 0 .. G-1 per row, as HF's embed_global(arange).
torch::Tensor global_token_states(const torch::Tensor& embed_global, std::int64_t batch);

// HF staggers every other layer: the layers with an odd index (1, 3, ...), and only with stagger_local_blocks.
inline bool staggers_blocks(std::int64_t layer_index, bool stagger_local_blocks) {
  return stagger_local_blocks && layer_index % 2 == 1;
}

struct PegasusXLayerOptions {
  std::int64_t d_model = 0;
  std::int64_t heads = 1;
  std::int64_t ffn_dim = 0;
  std::int64_t block_size = 512;
  bool stagger_blocks = false;  // this layer's stagger_blocks_this_layer (staggers_blocks above)
  Activation activation = Activation::gelu;
  double dropout = 0.0;             // after the attention and after fc2 (HF config.dropout)
  double attention_dropout = 0.0;   // on both attention probabilities
  double activation_dropout = 0.0;  // after fc1's activation
  double layer_norm_eps = 1e-5;
  bool byte_mask_dropout = true;  // KernelChoices::byte_mask_dropout; off: torch::dropout, HF's masks for a seed
  bool recomputed_feed_forward = true;  // KernelChoices::recomputed_feed_forward (kernels/feed_forward.h)
  bool recomputed_attention_dropout = true;  // KernelChoices::recomputed_attention_dropout (kernels/attention_dropout.h)
};

class PegasusXGlobalLocalAttentionImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument when heads do not divide d_model or block_size < 1.
  PegasusXGlobalLocalAttentionImpl(std::int64_t d_model, std::int64_t heads, std::int64_t block_size,
                                   double dropout = 0.0);
  // hidden (B, P, D) with P a multiple of block_size, global (B, G, D), mask (B, P) additive  ->  the attention
  // outputs of both, already through out_proj.
  PegasusXStates forward(const torch::Tensor& hidden, const torch::Tensor& global, const torch::Tensor& mask);
  void set_byte_mask_dropout(bool on) { byte_mask_dropout_ = on; }
  void set_recomputed_dropout(bool on) { recomputed_dropout_ = on; }

  torch::nn::Linear k_proj{nullptr}, v_proj{nullptr}, q_proj{nullptr}, out_proj{nullptr};

 private:
  torch::Tensor split_heads(const torch::Tensor& x) const;   // (B, T, D) -> (B, H, T, hd)
  torch::Tensor merge_heads(const torch::Tensor& x) const;   // (B, H, T, hd) -> (B, T, D)

  std::int64_t heads_;
  std::int64_t head_dim_;
  std::int64_t block_size_;
  double scaling_;
  double dropout_;
  bool byte_mask_dropout_ = true;
  bool recomputed_dropout_ = true;
};
TORCH_MODULE(PegasusXGlobalLocalAttention);

class PegasusXEncoderLayerImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument for a staggered layer with an odd block_size (HF's half-block padding would not
  // keep the length a multiple of the block), and as the attention does.
  explicit PegasusXEncoderLayerImpl(const PegasusXLayerOptions& options);
  // hidden (B, P, D), global (B, G, D), mask (B, P) additive (pad_to_blocks)  ->  the next layer's states.
  PegasusXStates forward(const torch::Tensor& hidden, const torch::Tensor& global, const torch::Tensor& mask);
  const PegasusXLayerOptions& options() const { return options_; }
  // The stack's KernelChoices that reach these layers: the byte-mask dropout, the recomputed feed-forward and the
  // attention node (probabilities and dropout recomputed).
  void set_kernel_choices(bool byte_mask_dropout, bool recomputed_feed_forward, bool recomputed_attention_dropout);

  PegasusXGlobalLocalAttention self_attn{nullptr};
  torch::nn::LayerNorm self_attn_layer_norm{nullptr}, global_self_attn_layer_norm{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::LayerNorm final_layer_norm{nullptr};

 private:
  torch::Tensor feed_forward(const torch::Tensor& x);  // x + dropout(fc2(dropout(act(fc1(norm(x))))))

  PegasusXLayerOptions options_;
};
TORCH_MODULE(PegasusXEncoderLayer);

}  // namespace fitsum::model
