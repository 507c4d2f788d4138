// LongT5 (transformers' LongT5ForConditionalGeneration: google/long-t5-local-*, google/long-t5-tglobal-*): T5 v1.1's
// config fields and layers, with an encoder whose attention is local (local_radius) or transient-global (plus
// global_block_size), encoder_attention_type choosing; the decoder is T5's; T5's tokenizer.
#include <stdexcept>

#include "fitsum/families/config_fields.h"
#include "fitsum/families/family.h"
#include "fitsum/families/t5_style_config.h"
#include "fitsum/tokenizer/t5_tokenizer.h"

namespace fitsum::families {

namespace {

using nlohmann::json;

// transformers 4.47's LongT5Config.__init__ attributes and defaults.
constexpr const char* kLongT5ConfigAttributes = R"({
  "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8,
  "local_radius": 127, "global_block_size": 16, "relative_attention_num_buckets": 32,
  "relative_attention_max_distance": 128, "dropout_rate": 0.1, "layer_norm_epsilon": 1e-06, "initializer_factor": 1.0,
  "feed_forward_proj": "relu", "is_encoder_decoder": true, "encoder_attention_type": "local", "use_cache": true,
  "pad_token_id": 0, "eos_token_id": 1
})";

// google/long-t5-tglobal-base's config.json fields that differ from LongT5Config's defaults (the whole file:
// configs/long-t5-tglobal-base).
constexpr const char* kLongT5TGlobalBaseShape = R"({
  "model_type": "longt5", "d_model": 768, "d_ff": 2048, "num_layers": 12, "num_decoder_layers": 12, "num_heads": 12,
  "feed_forward_proj": "gated-gelu", "encoder_attention_type": "transient-global", "n_positions": 4096,
  "decoder_start_token_id": 0, "tie_word_embeddings": false
})";

model::ModelConfig read_long_t5_config(const json& j, const std::string& model_type, const std::string& source) {
  model::ModelConfig c = read_t5_config(j, model_type, source);  // LongT5Config's defaults are T5Config's
  const auto attention = field<std::string>(j, "encoder_attention_type", "local", source);
  if (attention == "local") {
    c.encoder_attention = model::EncoderAttention::local;
  } else if (attention == "transient-global") {
    c.encoder_attention = model::EncoderAttention::transient_global;
  } else {
    throw std::invalid_argument(source + ": config field 'encoder_attention_type' is '" + attention +
                                "'; LongT5 has 'local' and 'transient-global'");
  }
  c.local_radius = field<std::int64_t>(j, "local_radius", 127, source);
  c.global_block_size = field<std::int64_t>(j, "global_block_size", 16, source);
  return c;
}

void write_long_t5_config(const model::ModelConfig& c, json& j) {
  write_t5_config(c, j);
  j["encoder_attention_type"] =
      c.encoder_attention == model::EncoderAttention::transient_global ? "transient-global" : "local";
  j["local_radius"] = c.local_radius;
  j["global_block_size"] = c.global_block_size;
}

}  // namespace

const Family& long_t5_family() {
  static const Family family = [] {
    Family f;
    f.name = "LongT5";
    // Pretrained with PEGASUS's gap-sentence objective on C4, without a task prefix.
    f.model_types = {{"longt5", "LongT5ForConditionalGeneration", "LongT5Config", kLongT5ConfigAttributes, false}};
    f.read_config = read_long_t5_config;
    f.write_config = write_long_t5_config;
    f.derived_attributes = t5_derived_attributes;
    f.attribute_map = {{"hidden_size", "d_model"}, {"num_attention_heads", "num_heads"},
                       {"num_hidden_layers", "num_layers"}, {"head_dim", "d_kv"}};
    f.tokenizer_class_prefixes = {"LongT5"};  // google/long-t5-* name T5Tokenizer: the T5 record's, the same one
    f.tokenizer_files = {};
    f.load_tokenizer = load_tokenizer_of<tokenizer::T5Tokenizer>;
    f.shapes = {{"long-t5-tglobal-base", kLongT5TGlobalBaseShape}};
    return f;
  }();
  return family;
}

}  // namespace fitsum::families
