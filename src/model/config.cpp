// Implements include/fitsum/model/config.h: validation and parameter arithmetic.
#include "fitsum/model/config.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "fitsum/util/checked_math.h"

namespace fitsum::model {

namespace {

// Sizes beyond these describe no model that could be built, and would overflow the parameter arithmetic: token
// ids are 32-bit, and a (vocab x d_model) table must be countable in 64 bits with room to spare.
constexpr std::int64_t kMaxVocabSize = 2147483647;
constexpr std::int64_t kMaxWidth = std::int64_t{1} << 20;
constexpr std::int64_t kMaxLayers = 10000;
constexpr std::int64_t kMaxPositions = std::int64_t{1} << 24;

void require_positive(std::int64_t value, const char* field, std::int64_t limit) {
  if (value <= 0) {
    throw std::invalid_argument(std::string("config field '") + field + "' must be positive, found " +
                                std::to_string(value));
  }
  if (value > limit) {
    throw std::invalid_argument(std::string("config field '") + field + "' is " + std::to_string(value) +
                                ", more than the " + std::to_string(limit) + " any buildable model has");
  }
}

void require_probability(double value, const char* field) {
  if (!(value >= 0.0 && value < 1.0)) {
    throw std::invalid_argument(std::string("config field '") + field + "' must be in [0, 1), found " +
                                std::to_string(value));
  }
}

// Each layout builds one variant of the blocks (seq2seq.cpp, count_parameters): blocks with relative positions,
// RMSNorm and no biases (T5's module tree); layers with a position table, LayerNorm and biases.
void require_layout_variants(const ModelConfig& c) {
  const bool blocks = c.module_layout == ModuleLayout::blocks;
  const auto require = [&](bool holds, const char* field, const char* needed) {
    if (holds) return;
    throw std::invalid_argument(std::string("config field '") + field + "' must be " + needed + " with module_layout " +
                                to_string(c.module_layout) + ": the only variant that layout builds");
  };
  require((c.position_embedding == PositionEmbedding::relative) == blocks, "position_embedding",
          blocks ? "relative" : "sinusoidal, learned or computed");
  require((c.normalization == Normalization::rms_norm) == blocks, "normalization", blocks ? "rms_norm" : "layer_norm");
  require(c.linear_bias != blocks, "linear_bias", blocks ? "false" : "true");
}

// The long-input encoders build their own family's layers (pegasus_x_layers.h, long_t5_layers.h), whatever else the
// config says: a combination they do not build is refused rather than silently computed otherwise.
void require_encoder_attention_variants(const ModelConfig& c) {
  const auto require = [&](bool holds, const char* field, const std::string& needed) {
    if (holds) return;
    throw std::invalid_argument(std::string("config field '") + field + "' must be " + needed +
                                " with encoder_attention " + to_string(c.encoder_attention) +
                                ": the only variant that encoder builds");
  };
  switch (c.encoder_attention) {
    case EncoderAttention::full:
      return;
    case EncoderAttention::global_local:
      require(c.module_layout == ModuleLayout::layers, "module_layout", "layers");
      require(c.normalize_before, "normalize_before", "true");
      require(c.final_layer_norm, "final_layer_norm", "true");
      require(!c.layernorm_embedding, "layernorm_embedding", "false");
      require(!c.attention_bias, "attention_bias", "false");
      require(c.position_embedding != PositionEmbedding::learned, "position_embedding", "sinusoidal or computed");
      require_positive(c.block_size, "block_size", kMaxPositions);
      require_positive(c.num_global_tokens, "num_global_tokens", kMaxPositions);
      require(!c.stagger_local_blocks || c.block_size % 2 == 0, "block_size",
              "even (a staggered layer shifts its blocks by half a block; or set stagger_local_blocks false)");
      return;
    case EncoderAttention::local:
    case EncoderAttention::transient_global:
      require(c.module_layout == ModuleLayout::blocks, "module_layout", "blocks");
      if (c.local_radius < 0) {
        throw std::invalid_argument("config field 'local_radius' must not be negative, found " +
                                    std::to_string(c.local_radius));
      }
      require_positive(c.local_radius + 1, "local_radius + 1", kMaxPositions);
      if (c.encoder_attention == EncoderAttention::transient_global) {
        require_positive(c.global_block_size, "global_block_size", kMaxPositions);
      }
      return;
  }
}

}  // namespace

void ModelConfig::validate() const {
  require_positive(vocab_size, "vocab_size", kMaxVocabSize);
  require_positive(d_model, "d_model", kMaxWidth);
  require_positive(encoder_layers, "encoder_layers", kMaxLayers);
  require_positive(decoder_layers, "decoder_layers", kMaxLayers);
  require_positive(encoder_attention_heads, "encoder_attention_heads", kMaxWidth);
  require_positive(decoder_attention_heads, "decoder_attention_heads", kMaxWidth);
  require_positive(encoder_ffn_dim, "encoder_ffn_dim", kMaxWidth);
  require_positive(decoder_ffn_dim, "decoder_ffn_dim", kMaxWidth);
  // Relative positions (T5) have no table, so no limit: the config carries kNoPositionLimit.
  if (position_embedding != PositionEmbedding::relative) {
    require_positive(max_position_embeddings, "max_position_embeddings", kMaxPositions);
  }
  if (head_dim != 0) require_positive(head_dim, "d_kv", kMaxWidth);
  if (head_dim == 0 && d_model % encoder_attention_heads != 0) {
    throw std::invalid_argument("config field 'd_model' (" + std::to_string(d_model) +
                                ") must be divisible by 'encoder_attention_heads' (" +
                                std::to_string(encoder_attention_heads) + ")");
  }
  if (head_dim == 0 && d_model % decoder_attention_heads != 0) {
    throw std::invalid_argument("config field 'd_model' (" + std::to_string(d_model) +
                                ") must be divisible by 'decoder_attention_heads' (" +
                                std::to_string(decoder_attention_heads) + ")");
  }
  require_probability(dropout, "dropout");
  require_probability(attention_dropout, "attention_dropout");
  require_probability(activation_dropout, "activation_dropout");
  const auto check_token = [&](std::int64_t id, const char* field, bool optional) {
    if ((optional && id == -1)) {
      return;
    }
    if (id < 0 || id >= vocab_size) {
      throw std::invalid_argument(std::string("config field '") + field + "' (" + std::to_string(id) +
                                  ") is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
  };
  check_token(pad_token_id, "pad_token_id", false);
  check_token(eos_token_id, "eos_token_id", false);
  check_token(decoder_start_token_id, "decoder_start_token_id", false);
  check_token(forced_eos_token_id, "forced_eos_token_id", true);
  if (!(layer_norm_eps > 0.0)) {
    throw std::invalid_argument("config field 'layer_norm_eps' must be positive");
  }
  require_layout_variants(*this);
  require_encoder_attention_variants(*this);
}

const char* to_string(Activation activation) {
  switch (activation) {
    case Activation::relu:
      return "relu";
    case Activation::gelu:
      return "gelu";
    case Activation::gelu_new:
      return "gelu_new";
    case Activation::silu:
      return "silu";
  }
  return "?";
}

const char* to_string(ModuleLayout layout) { return layout == ModuleLayout::blocks ? "blocks" : "layers"; }

const char* to_string(EncoderAttention attention) {
  switch (attention) {
    case EncoderAttention::full:
      return "full";
    case EncoderAttention::global_local:
      return "global_local";
    case EncoderAttention::local:
      return "local";
    case EncoderAttention::transient_global:
      return "transient_global";
  }
  return "?";
}

Activation activation_from_string(const std::string& name) {
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::gelu_new;
  if (name == "silu" || name == "swish") return Activation::silu;
  throw std::invalid_argument("config field 'activation_function' is '" + name +
                              "', which fitsum does not support (supported: relu, gelu, gelu_new, silu)");
}

namespace {

// The blocks layout (transformers' T5ForConditionalGeneration): no biases, RMSNorm weights only, the relative
// position table in the first block of each stack, no final_logits_bias.
ParameterCounts count_block_parameters(const ModelConfig& c) {
  ParameterCounts counts;
  const std::int64_t d = c.d_model;
  const auto add_matrix = [&](std::int64_t rows, std::int64_t cols) {
    counts.trainable += rows * cols;
    counts.matrix_elements += rows * cols;
    counts.matrix_rows_plus_cols += rows + cols;
    counts.trainable_tensors.push_back({rows * cols, rows + cols});
  };
  const auto add_norm = [&]() {
    counts.trainable += d;
    counts.vector_elements += d;
    counts.trainable_tensors.push_back({d, 0});
  };
  add_matrix(c.vocab_size, d);                              // shared
  if (!c.tie_word_embeddings) add_matrix(c.vocab_size, d);  // lm_head
  for (int side = 0; side < 2; ++side) {
    const bool decoder = side == 1;
    const std::int64_t heads = decoder ? c.decoder_attention_heads : c.encoder_attention_heads;
    const std::int64_t inner = heads * (decoder ? c.decoder_head_dim() : c.encoder_head_dim());
    const std::int64_t ffn = decoder ? c.decoder_ffn_dim : c.encoder_ffn_dim;
    const auto add_attention = [&]() {
      for (int i = 0; i < 3; ++i) add_matrix(inner, d);  // q, k, v
      add_matrix(d, inner);                              // o
      add_norm();                                        // layer_norm
    };
    // LongT5's transient-global encoder blocks: a second table in block 0, a side-key RMSNorm in every block.
    const bool transient_global = !decoder && c.encoder_attention == EncoderAttention::transient_global;
    add_matrix(c.relative_attention_num_buckets, heads);  // block.0's relative_attention_bias
    if (transient_global) add_matrix(c.relative_attention_num_buckets, heads);  // global_relative_attention_bias
    for (std::int64_t i = 0; i < (decoder ? c.decoder_layers : c.encoder_layers); ++i) {
      add_attention();                      // SelfAttention (LongT5: LocalSelfAttention, ...)
      if (transient_global) add_norm();     // global_input_layer_norm
      if (decoder) add_attention();         // EncDecAttention
      add_matrix(ffn, d);                   // wi, or wi_0
      if (c.gated_ffn) add_matrix(ffn, d);  // wi_1
      add_matrix(d, ffn);                   // wo
      add_norm();
    }
    add_norm();  // final_layer_norm
  }
  return counts;
}

}  // namespace

ParameterCounts count_parameters(const ModelConfig& c) {
  if (c.module_layout == ModuleLayout::blocks) return count_block_parameters(c);
  ParameterCounts counts;
  const std::int64_t d = c.d_model;
  // Checked: a config is user input, and a count that wraps would be printed as a negative parameter count.
  const auto add = [](std::int64_t& total, std::int64_t n) {
    if (util::add_overflows(total, n, total)) {
      throw std::invalid_argument("the config describes more parameters than a 64-bit count holds");
    }
  };
  const auto product = [](std::int64_t a, std::int64_t b) {
    return util::checked_multiply(a, b, std::string("the parameter count of the config"));
  };
  const auto add_matrix = [&](std::int64_t rows, std::int64_t cols) {
    add(counts.trainable, product(rows, cols));
    add(counts.matrix_elements, product(rows, cols));
    add(counts.matrix_rows_plus_cols, rows + cols);
    counts.trainable_tensors.push_back({product(rows, cols), rows + cols});
  };
  const auto add_vector = [&](std::int64_t n) {
    add(counts.trainable, n);
    add(counts.vector_elements, n);
    counts.trainable_tensors.push_back({n, 0});
  };
  const auto add_linear = [&](std::int64_t out, std::int64_t in) {
    add_matrix(out, in);
    add_vector(out);
  };
  const auto add_layer_norm = [&]() {
    add_vector(d);
    add_vector(d);
  };
  const auto add_attention = [&]() {
    for (int i = 0; i < 4; ++i) c.attention_bias ? add_linear(d, d) : add_matrix(d, d);
    add_layer_norm();
  };

  add_matrix(c.vocab_size, d);                                  // model.shared
  if (!c.tie_word_embeddings) add_matrix(c.vocab_size, d);      // lm_head
  if (c.has_final_logits_bias) add(counts.frozen, c.vocab_size);  // final_logits_bias
  for (int side = 0; side < 2; ++side) {
    const bool decoder = side == 1;
    const std::int64_t layers = decoder ? c.decoder_layers : c.encoder_layers;
    const std::int64_t ffn = decoder ? c.decoder_ffn_dim : c.encoder_ffn_dim;
    // PEGASUS-X's encoder: the global tokens' embedding, and their own LayerNorm in every layer.
    const bool global_local = !decoder && c.encoder_attention == EncoderAttention::global_local;
    if (global_local) add_matrix(c.num_global_tokens, d);  // embed_global
    if (c.position_embedding == PositionEmbedding::sinusoidal) {
      add(counts.frozen, product(c.max_position_embeddings, d));
    } else if (c.position_embedding == PositionEmbedding::learned) {
      add_matrix(c.max_position_embeddings + c.learned_position_offset, d);
    }
    if (c.layernorm_embedding) add_layer_norm();
    for (std::int64_t i = 0; i < layers; ++i) {
      add_attention();               // self_attn + self_attn_layer_norm
      if (global_local) add_layer_norm();  // global_self_attn_layer_norm
      if (decoder) add_attention();  // encoder_attn + encoder_attn_layer_norm
      add_linear(ffn, d);            // fc1
      add_linear(d, ffn);            // fc2
      add_layer_norm();              // final_layer_norm
    }
    if (c.final_layer_norm) add_layer_norm();
  }
  return counts;
}

ForwardFlops forward_matmul_flops(const ModelConfig& c, std::int64_t batch, std::int64_t source_length,
                                  std::int64_t target_length) {
  const double b = static_cast<double>(batch);
  const double s = static_cast<double>(source_length);
  const double t = static_cast<double>(target_length);
  const double d = static_cast<double>(c.d_model);
  // One (m x k) x (k x n) product costs 2mkn.
  const auto product = [](double m, double k, double n) { return 2.0 * m * k * n; };
  ForwardFlops f;
  // Encoder layer: q, k, v, out projections; scores and weighted values; the two feed-forward products. The keys
  // each query sees: all s, or the long-input encoders' windows (model/config.h EncoderAttention), where the
  // global tokens of PEGASUS-X also run the projections, the feed-forward and their own attention over every key.
  const double ffn = static_cast<double>(c.encoder_ffn_dim);
  const double heads_width = d;  // the attention's inner width, d_model's for every family but T5 (d_kv x heads)
  double keys = s;
  double extra_rows = 0.0;  // PEGASUS-X's global tokens
  switch (c.encoder_attention) {
    case EncoderAttention::full:
      break;
    case EncoderAttention::global_local:
      extra_rows = static_cast<double>(c.num_global_tokens);
      keys = std::min(s, static_cast<double>(c.block_size)) + extra_rows;
      break;
    case EncoderAttention::local:
      keys = std::min(s, 3.0 * static_cast<double>(c.local_radius + 1));
      break;
    case EncoderAttention::transient_global:
      keys = std::min(s, 3.0 * static_cast<double>(c.local_radius + 1)) +
             std::ceil(s / static_cast<double>(c.global_block_size));
      break;
  }
  const double rows = s + extra_rows;
  f.encoder_layer = 4.0 * product(b * rows, d, heads_width) + 2.0 * product(b * s, heads_width, keys) +
                    2.0 * product(b * extra_rows, heads_width, s + extra_rows) + 2.0 * product(b * rows, d, ffn);
  // Decoder layer: causal self-attention over t, cross-attention (k and v projected from the s encoder states).
  f.decoder_layer = 4.0 * product(b * t, d, d) + 2.0 * product(b * t, d, t) + 2.0 * product(b * t, d, d) +
                    2.0 * product(b * s, d, d) + 2.0 * product(b * t, d, s) +
                    2.0 * product(b * t, d, static_cast<double>(c.decoder_ffn_dim));
  f.lm_head = product(b * t, d, static_cast<double>(c.vocab_size));
  return f;
}

double training_matmul_flops(const ModelConfig& c, std::int64_t batch, std::int64_t source_length,
                             std::int64_t target_length) {
  const auto f = forward_matmul_flops(c, batch, source_length, target_length);
  const double forward = static_cast<double>(c.encoder_layers) * f.encoder_layer +
                         static_cast<double>(c.decoder_layers) * f.decoder_layer + f.lm_head;
  return 3.0 * forward;  // backward: the gradients of both operands of every product
}

std::optional<ArchitectureDifference> architecture_difference(const ModelConfig& first, const ModelConfig& second) {
  if (first.model_type != second.model_type)
    return ArchitectureDifference{"model_type", first.model_type, second.model_type};
  if (first.module_layout != second.module_layout)
    return ArchitectureDifference{"module_layout", to_string(first.module_layout), to_string(second.module_layout)};
  const std::pair<const char*, std::int64_t ModelConfig::*> sizes[] = {
      {"vocab_size", &ModelConfig::vocab_size},
      {"d_model", &ModelConfig::d_model},
      {"encoder_layers", &ModelConfig::encoder_layers},
      {"decoder_layers", &ModelConfig::decoder_layers},
      {"encoder_attention_heads", &ModelConfig::encoder_attention_heads},
      {"decoder_attention_heads", &ModelConfig::decoder_attention_heads},
      {"encoder_ffn_dim", &ModelConfig::encoder_ffn_dim},
      {"decoder_ffn_dim", &ModelConfig::decoder_ffn_dim},
      {"d_kv", &ModelConfig::head_dim},
      {"max_position_embeddings", &ModelConfig::max_position_embeddings},
      {"relative_attention_num_buckets", &ModelConfig::relative_attention_num_buckets},
      {"num_global_tokens", &ModelConfig::num_global_tokens}};
  for (const auto& [field, member] : sizes) {
    if (first.*member != second.*member) {
      return ArchitectureDifference{field, std::to_string(first.*member), std::to_string(second.*member)};
    }
  }
  const std::pair<const char*, bool ModelConfig::*> variants[] = {
      {"normalize_before", &ModelConfig::normalize_before},
      {"final_layer_norm", &ModelConfig::final_layer_norm},
      {"layernorm_embedding", &ModelConfig::layernorm_embedding},
      {"tie_word_embeddings", &ModelConfig::tie_word_embeddings},
      {"gated_ffn", &ModelConfig::gated_ffn},
      {"linear_bias", &ModelConfig::linear_bias},
      {"attention_bias", &ModelConfig::attention_bias},
      {"has_final_logits_bias", &ModelConfig::has_final_logits_bias}};
  for (const auto& [field, member] : variants) {
    if (first.*member != second.*member) {
      return ArchitectureDifference{field, first.*member ? "true" : "false", second.*member ? "true" : "false"};
    }
  }
  if (first.encoder_attention != second.encoder_attention) {
    return ArchitectureDifference{"encoder_attention", to_string(first.encoder_attention),
                                  to_string(second.encoder_attention)};
  }
  if (first.activation_function != second.activation_function) {
    return ArchitectureDifference{"activation_function", to_string(first.activation_function),
                                  to_string(second.activation_function)};
  }
  return std::nullopt;
}

ModelConfig pegasus_shape(const std::string& name) {
  ModelConfig c;  // the defaults are google/pegasus-large
  c.dropout = 0.1;
  c.attention_dropout = 0.1;
  c.activation_dropout = 0.1;
  const auto set = [&c](std::int64_t d_model, std::int64_t layers, std::int64_t ffn, std::int64_t heads) {
    c.d_model = d_model;
    c.encoder_layers = c.decoder_layers = layers;
    c.encoder_ffn_dim = c.decoder_ffn_dim = ffn;
    c.encoder_attention_heads = c.decoder_attention_heads = heads;
  };
  if (name == "tiny") {
    set(64, 2, 256, 4);
  } else if (name == "small") {
    set(512, 6, 2048, 8);
  } else if (name == "base") {
    set(768, 12, 3072, 12);
  } else if (name == "large") {
    set(1024, 16, 4096, 16);
  } else {
    throw std::invalid_argument("unknown model shape '" + name + "' (choose tiny, small, base or large)");
  }
  return c;
}

}  // namespace fitsum::model
