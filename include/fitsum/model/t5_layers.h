// The pieces T5 (v1.0, v1.1, FLAN-T5, mT5) adds to the encoder-decoder of seq2seq.h, each matching transformers'
// modeling_t5.py (4.35):
//   - relative_position_bucket / RelativePositionBias: T5Attention._relative_position_bucket and compute_bias. The
//     first layer of each stack owns the table (num_buckets, heads) and its bias is shared by every layer of that
//     stack; bidirectional in the encoder, causal in the decoder, none in cross-attention.
//   - RMSNorm: T5LayerNorm, no mean and no bias, the variance in float32 whatever the activations' dtype.
//   - T5FeedForward: DenseReluDense (wi, relu, wo) for v1.0 or DenseGatedActDense (gelu_new(wi_0 x) * wi_1 x, wo)
//     for v1.1 / FLAN-T5; no biases anywhere.
// Module names are the checkpoint's (relative_attention_bias, weight, wi, wi_0, wi_1, wo).
#pragma once

#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace fitsum::model {

// relative_position = key position - query position, any shape of int64  ->  bucket ids of the same shape.
// Half the buckets (bidirectional) or all (causal: future positions share bucket 0) cover exact small distances;
// the rest grow logarithmically up to max_distance, beyond which distances share the last bucket.
torch::Tensor relative_position_bucket(const torch::Tensor& relative_position, bool bidirectional,
                                       std::int64_t num_buckets, std::int64_t max_distance);

class RelativePositionBiasImpl : public torch::nn::Module {
 public:
  RelativePositionBiasImpl(std::int64_t num_buckets, std::int64_t max_distance, std::int64_t heads, bool bidirectional);
  // The additive bias of `query_length` queries at positions past_length .. past_length + query_length - 1 over
  // keys 0 .. past_length + query_length - 1  ->  (1, heads, query_length, past_length + query_length)
  torch::Tensor forward(std::int64_t query_length, std::int64_t past_length);

  torch::nn::Embedding relative_attention_bias{nullptr};  // (num_buckets, heads)

 private:
  std::int64_t num_buckets_;
  std::int64_t max_distance_;
  bool bidirectional_;
};
TORCH_MODULE(RelativePositionBias);

class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(std::int64_t dim, double eps = 1e-6);
  // x (..., D): x / sqrt(mean(x^2) + eps) * weight, the mean taken in float32; returns weight's dtype when that is
  // bfloat16 or float16 (as T5LayerNorm does), x's promoted dtype otherwise.
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;  // (D)
  // One autograd node keeping x and the float32 reciprocal RMS (KernelChoices::fused_rms_norm); off: the plain
  // LibTorch operations, as transformers writes them.
  bool fused = true;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

class T5FeedForwardImpl : public torch::nn::Module {
 public:
  // gated: v1.1's wi_0 / wi_1 with gelu_new; otherwise v1.0's wi with relu.
  T5FeedForwardImpl(std::int64_t d_model, std::int64_t d_ff, bool gated);
  // x (B, T, D)  ->  (B, T, D); `dropout` applies after the activation (HF's DenseReluDense.dropout), with fitsum's
  // uint8-mask dropout unless `byte_mask_dropout` is off (KernelChoices).
  torch::Tensor forward(const torch::Tensor& x, double dropout, bool training, bool byte_mask_dropout = true);

  torch::nn::Linear wi{nullptr}, wi_0{nullptr}, wi_1{nullptr}, wo{nullptr};
};
TORCH_MODULE(T5FeedForward);

}  // namespace fitsum::model
