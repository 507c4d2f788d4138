// The long-input encoders of include/fitsum/model/seq2seq.h's StackImpl (ModelConfig::encoder_attention other than
// full): PEGASUS-X's global-local layers (HF PegasusXEncoder, model/pegasus_x_layers.h) and LongT5's local and
// transient-global blocks (HF LongT5Stack, model/long_t5_layers.h). The embeddings, the final norms, checkpointing
// and the kernel choices are the stack's own; only the layer loop and its masks differ.
#include <torch/torch.h>

#include "fitsum/kernels/dropout.h"
#include "fitsum/model/activation_checkpoint.h"
#include "fitsum/model/long_t5_layers.h"
#include "fitsum/model/pegasus_x_layers.h"
#include "fitsum/model/seq2seq.h"

namespace fitsum::model {

namespace {

PegasusXLayerOptions pegasus_x_options(const ModelConfig& c, std::int64_t index) {
  PegasusXLayerOptions o;
  o.d_model = c.d_model;
  o.heads = c.encoder_attention_heads;
  o.ffn_dim = c.encoder_ffn_dim;
  o.block_size = c.block_size;
  o.stagger_blocks = staggers_blocks(index, c.stagger_local_blocks);
  o.activation = c.activation_function;
  o.dropout = c.dropout;
  o.attention_dropout = c.attention_dropout;
  o.activation_dropout = c.activation_dropout;
  o.layer_norm_eps = c.layer_norm_eps;
  return o;
}

LongT5LayerOptions long_t5_options(const ModelConfig& c, std::int64_t index) {
  LongT5LayerOptions o;
  o.d_model = c.d_model;
  o.d_kv = c.encoder_head_dim();
  o.heads = c.encoder_attention_heads;
  o.d_ff = c.encoder_ffn_dim;
  o.gated_ffn = c.gated_ffn;
  o.local_radius = c.local_radius;
  o.global_block_size = c.global_block_size;
  o.num_buckets = c.relative_attention_num_buckets;
  o.max_distance = c.relative_attention_max_distance;
  o.layer_norm_eps = c.layer_norm_eps;
  o.dropout = c.dropout;
  o.attention_type = c.encoder_attention == EncoderAttention::transient_global ? LongT5AttentionType::transient_global
                                                                                 : LongT5AttentionType::local;
  o.has_relative_attention_bias = index == 0;
  return o;
}

}  // namespace

void StackImpl::build_long_encoder(const ModelConfig& c) {
  if (attention_ == EncoderAttention::global_local) {
    // HF PegasusXEncoder: embed_tokens (model.shared, not registered again), embed_global, embed_positions (computed,
    // no tensor), layers, layer_norm.
    embed_global = register_module("embed_global", torch::nn::Embedding(c.num_global_tokens, c.d_model));
    if (!computed_positions_) embed_positions = register_module("embed_positions", PositionalEmbedding(c));
    layers = register_module("layers", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < c.encoder_layers; ++i) layers->push_back(PegasusXEncoderLayer(pegasus_x_options(c, i)));
    layer_norm = register_module("layer_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})
                                                                        .eps(c.layer_norm_eps)));
    return;
  }
  // HF LongT5Stack of the encoder: block, final_layer_norm.
  layers = register_module("block", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.encoder_layers; ++i) layers->push_back(LongT5EncoderBlock(long_t5_options(c, i)));
  final_rms = register_module("final_layer_norm", RMSNorm(c.d_model, c.layer_norm_eps));
}

torch::Tensor StackImpl::encode_long(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  TORCH_CHECK(kind_ == StackKind::encoder && attention_ != EncoderAttention::full,
              "encode_long() called on a stack without a long-input encoder");
  TORCH_CHECK(attention_mask.dim() == 2 && attention_mask.sizes() == input_ids.sizes(),
              "attention_mask must be (batch, length) as input_ids ", input_ids.sizes(), ", got ",
              attention_mask.sizes());
  return attention_ == EncoderAttention::global_local ? encode_global_local(input_ids, attention_mask)
                                                      : encode_local(input_ids, attention_mask);
}

torch::Tensor StackImpl::encode_global_local(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  const auto length = input_ids.size(1);
  auto padded = pad_to_blocks(embed(input_ids, 0), attention_mask, block_size_);  // (B, P, D), (B, P)
  PegasusXStates states{padded.hidden, global_token_states(embed_global->weight, input_ids.size(0))};
  const auto mask = padded.mask;
  for (std::size_t i = 0; i < layers->size(); ++i) {
    auto layer = layers[i]->as<PegasusXEncoderLayer>();
    if (is_training() && static_cast<std::int64_t>(i) < checkpointed_layers_) {
      // Both the tokens' and the global tokens' states are the layer's inputs and outputs.
      auto out = checkpoint(
          [layer, mask](const TensorList& in) {
            auto next = layer->forward(in[0], in[1], mask);
            return TensorList{next.hidden, next.global};
          },
          {states.hidden, states.global});
      states = {out[0], out[1]};
    } else {
      states = layer->forward(states.hidden, states.global, mask);
    }
  }
  return layer_norm->forward(states.hidden.narrow(1, 0, length));  // the padding to whole blocks cut off
}

torch::Tensor StackImpl::encode_local(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  LongT5Attended state{embed(input_ids, 0), {}};  // (B, S, D) after the embedding dropout
  for (std::size_t i = 0; i < layers->size(); ++i) {
    auto block = layers[i]->as<LongT5EncoderBlock>();
    if (is_training() && static_cast<std::int64_t>(i) < checkpointed_layers_) {
      // The first block makes the position bias (trained: relative_attention_bias) that every later block takes as
      // it is; it is an output of the first and an input of the others, so its gradient flows through the recompute.
      const bool bias_is_input = state.position_bias.defined();
      TensorList inputs{state.hidden};
      if (bias_is_input) inputs.push_back(state.position_bias);
      auto out = checkpoint(
          [block, attention_mask, bias_is_input](const TensorList& in) {
            auto next = block->forward(in[0], attention_mask, bias_is_input ? in[1] : torch::Tensor());
            return TensorList{next.hidden, next.position_bias};
          },
          inputs);
      state = {out[0], out[1]};
    } else {
      state = block->forward(state.hidden, attention_mask, state.position_bias);
    }
  }
  return finish(state.hidden);
}

}  // namespace fitsum::model
