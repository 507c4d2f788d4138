// The architecture of an encoder-decoder transformer, independent of any file format. One implementation
// (seq2seq.h) covers the model families through these switches: PEGASUS is pre-LayerNorm with sinusoidal positions
// and final LayerNorms; BART is post-LayerNorm with learned positions and `layernorm_embedding`; T5 is pre-RMSNorm
// with a relative position bias, no biases, unscaled attention scores and its own head width (d_kv). Reading
// Hugging Face config.json files into this struct lives in io/hf_config.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fitsum/kernels/activation.h"

namespace fitsum::model {

using kernels::Activation;  // relu, gelu, gelu_new, silu

enum class PositionEmbedding {
  sinusoidal,  // PEGASUS: fixed table, sin in the first half of the features, cos in the second; not trained
  learned,     // BART: a trained table indexed by position + learned_position_offset
  relative,    // T5: no table; a learned bias per (bucketed relative position, head) on the attention scores
  computed,    // PEGASUS-X: a sinusoidal table computed on the fly in the embeddings' dtype (its own frequencies,
               // model/pegasus_x_layers.h pegasus_x_positions); nothing stored
};

// What the encoder's self-attention sees (the decoder always attends fully). The long-input kinds grow linearly with
// the source length instead of with its square.
enum class EncoderAttention {
  full,              // every position attends to every position
  global_local,      // PEGASUS-X: blocks of block_size positions plus num_global_tokens global tokens
                     // (model/pegasus_x_layers.h); staggered every other layer with stagger_local_blocks
  local,             // LongT5: each position sees local_radius positions on either side (model/long_t5_layers.h)
  transient_global,  // LongT5: local, plus the sums of every global_block_size positions as side keys
};

// How the modules are laid out and named: the checkpoint keys the model's parameters carry.
enum class ModuleLayout {
  layers,  // model.{shared,encoder,decoder}, (en|de)coder.layers.N.{self_attn,encoder_attn,fc1,fc2,..._layer_norm}
  blocks,  // {shared,encoder,decoder}, (en|de)coder.block.N.layer.K.{SelfAttention,EncDecAttention,DenseReluDense}
};

enum class Normalization {
  layer_norm,  // PEGASUS, BART: mean and variance, weight and bias
  rms_norm,    // T5: root mean square only, weight only, computed in float32
};

// T5's positions have no table and so no length limit; max_position_embeddings is this for T5.
inline constexpr std::int64_t kNoPositionLimit = std::int64_t{1} << 30;

struct ModelConfig {
  std::string model_type = "pegasus";

  std::int64_t vocab_size = 96103;
  std::int64_t d_model = 1024;
  std::int64_t encoder_layers = 16;
  std::int64_t decoder_layers = 16;
  std::int64_t encoder_attention_heads = 16;
  std::int64_t decoder_attention_heads = 16;
  std::int64_t encoder_ffn_dim = 4096;
  std::int64_t decoder_ffn_dim = 4096;
  std::int64_t max_position_embeddings = 1024;
  Activation activation_function = Activation::relu;

  double dropout = 0.1;             // after attention blocks, feed-forward blocks and the embeddings
  double attention_dropout = 0.0;   // on the attention probabilities
  double activation_dropout = 0.0;  // after the feed-forward activation

  bool scale_embedding = true;       // multiply token embeddings by sqrt(d_model)
  bool normalize_before = true;      // pre-LayerNorm layers (PEGASUS) or post-LayerNorm (BART)
  bool final_layer_norm = true;      // LayerNorm after the last encoder and decoder layer (PEGASUS)
  bool layernorm_embedding = false;  // LayerNorm right after the embeddings (BART)
  PositionEmbedding position_embedding = PositionEmbedding::sinusoidal;
  ModuleLayout module_layout = ModuleLayout::layers;
  std::int64_t learned_position_offset = 2;  // BART's learned tables start at index 2
  bool tie_word_embeddings = true;           // LM head shares the token embedding (model.shared)
  double layer_norm_eps = 1e-5;
  double init_std = 0.02;

  std::int64_t pad_token_id = 0;
  std::int64_t eos_token_id = 1;
  std::int64_t bos_token_id = 0;
  std::int64_t decoder_start_token_id = 0;
  std::int64_t forced_eos_token_id = 1;  // -1: none

  // The token-embedding row whose lookups get no gradient (torch's Embedding padding_idx). HF builds model.shared
  // with padding_idx = pad_token_id, so the pad row learns only through the tied LM head; -1 turns that off (the
  // plain reference in ../shared/reference does, for instance).
  std::int64_t embedding_padding_idx = 0;

  // The block variants of the blocks layout (T5's); the defaults are the layers layout's (PEGASUS's and BART's).
  Normalization normalization = Normalization::layer_norm;
  bool linear_bias = true;             // T5: no bias in any projection
  bool scale_attention_scores = true;  // T5: q·k unscaled (the 1/sqrt(d_kv) is folded into its init)
  std::int64_t head_dim = 0;           // T5's d_kv; 0: d_model / heads
  bool gated_ffn = false;              // T5 v1.1 / FLAN-T5: act(wi_0 x) * wi_1 x
  bool scale_decoder_outputs = false;  // T5 v1.0 (HF 5 names it so): decoder output * d_model^-0.5 before the head
  bool has_final_logits_bias = true;   // PEGASUS / BART's buffer; T5 has none
  std::int64_t relative_attention_num_buckets = 32;
  std::int64_t relative_attention_max_distance = 128;
  bool attention_bias = true;  // the layers layout's q/k/v/out projections have biases (PEGASUS-X's have none)

  // The encoder's attention and its long-input settings (HF PegasusXConfig and LongT5Config names).
  EncoderAttention encoder_attention = EncoderAttention::full;
  std::int64_t block_size = 512;         // global_local: positions per local block
  std::int64_t num_global_tokens = 32;   // global_local
  bool stagger_local_blocks = true;      // global_local: every odd layer shifts its blocks by half a block
  std::int64_t local_radius = 127;       // local, transient_global: the window is local_radius + 1 wide blocks
  std::int64_t global_block_size = 16;   // transient_global: positions summed into one side key

  // Throws std::invalid_argument naming the field when the combination cannot be built: among others, each
  // module_layout builds one block variant (blocks: relative positions, RMSNorm, no biases; layers: a position
  // table or computed positions, LayerNorm, feed-forward biases), and each long-input encoder attention its own
  // family's layers (global_local: the layers layout, pre-LayerNorm, final LayerNorms, no attention biases; local
  // and transient_global: the blocks layout).
  void validate() const;

  std::int64_t encoder_head_dim() const { return head_dim > 0 ? head_dim : d_model / encoder_attention_heads; }
  std::int64_t decoder_head_dim() const { return head_dim > 0 ? head_dim : d_model / decoder_attention_heads; }
};

const char* to_string(Activation activation);
const char* to_string(ModuleLayout layout);  // "layers", "blocks"
const char* to_string(EncoderAttention attention);  // "full", "global_local", "local", "transient_global"
// Throws std::invalid_argument listing the supported names.
Activation activation_from_string(const std::string& name);

// Parameter counts computed from the config alone (no tensors allocated), as a model built from it would report.
struct ParameterCounts {
  std::int64_t trainable = 0;  // everything the optimizer updates
  std::int64_t frozen = 0;     // buffers stored in checkpoints: final_logits_bias, sinusoidal position tables
  std::int64_t total() const { return trainable + frozen; }
  // For memory estimates: elements of trainable matrices (≥ 2-D) and their rows + columns (Adafactor's factored
  // second moment), and elements of trainable vectors (Adafactor keeps a full second moment for those).
  std::int64_t matrix_elements = 0;
  std::int64_t matrix_rows_plus_cols = 0;
  std::int64_t vector_elements = 0;
  // Every trainable tensor (the shared embedding first): its elements, and its rows + columns (0 for a vector), for
  // what one process holds when the optimizer state is sharded by tensor (optim/sharding.h).
  struct Tensor {
    std::int64_t elements = 0;
    std::int64_t rows_plus_cols = 0;
  };
  std::vector<Tensor> trainable_tensors;
};
ParameterCounts count_parameters(const ModelConfig& config);

// Matrix-product floating-point operations of one training step (forward + backward = 3x forward) of `batch`
// sequences of `source_length` and `target_length` tokens: projections, attention products, feed-forward and the
// LM head, at 2 FLOPs per multiply-add. Recomputation (activation checkpointing) is not counted: the model's
// FLOPs, as MFU is usually defined.
double training_matmul_flops(const ModelConfig& config, std::int64_t batch, std::int64_t source_length,
                             std::int64_t target_length);

// The forward pass's matrix-product FLOPs of one layer of each stack and of the LM head, for `batch` sequences:
// what recomputing a checkpointed layer costs, and the parts training_matmul_flops adds up.
struct ForwardFlops {
  double encoder_layer = 0.0;
  double decoder_layer = 0.0;
  double lm_head = 0.0;
};
ForwardFlops forward_matmul_flops(const ModelConfig& config, std::int64_t batch, std::int64_t source_length,
                                  std::int64_t target_length);

// Where two configs describe different models: the field (HF's config.json name) and each config's value.
struct ArchitectureDifference {
  std::string field;
  std::string first;
  std::string second;
};
// The first difference between `first` and `second` in what makes a model's parameters and its function: model_type
// first, then module_layout, the sizes, the layer counts and the block variants. Dropout, initialisation and token
// ids may differ.
std::optional<ArchitectureDifference> architecture_difference(const ModelConfig& first, const ModelConfig& second);

// The PEGASUS architectures of the benchmarks, random init (configs/ holds the same as config.json files):
//   tiny   d_model 64,   2 + 2 layers,   ffn 256,  4 heads
//   small  d_model 512,  6 + 6 layers,   ffn 2048, 8 heads
//   base   d_model 768,  12 + 12 layers, ffn 3072, 12 heads
//   large  d_model 1024, 16 + 16 layers, ffn 4096, 16 heads (google/pegasus-large)
// all with the 96103-token vocabulary and dropout 0.1 everywhere. Throws std::invalid_argument for another name.
ModelConfig pegasus_shape(const std::string& name);

}  // namespace fitsum::model
