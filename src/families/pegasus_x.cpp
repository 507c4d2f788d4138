// PEGASUS-X (transformers' PegasusXForConditionalGeneration): PEGASUS's config fields with PegasusXConfig's
// defaults plus the encoder's block-local attention with global tokens (block_size, num_global_tokens,
// stagger_local_blocks); positions computed on the fly up to 16k; no biases in any attention; no final_logits_bias;
// PEGASUS's SentencePiece tokenizer.
#include "fitsum/families/bart_style_config.h"
#include "fitsum/families/config_fields.h"
#include "fitsum/families/family.h"
#include "fitsum/tokenizer/pegasus_tokenizer.h"

namespace fitsum::families {

namespace {

using nlohmann::json;

// transformers 4.47's PegasusXConfig.__init__ attributes and defaults.
constexpr const char* kPegasusXConfigAttributes = R"({
  "vocab_size": 96103, "max_position_embeddings": 16384, "encoder_layers": 16, "encoder_ffn_dim": 4096,
  "encoder_attention_heads": 16, "decoder_layers": 16, "decoder_ffn_dim": 4096, "decoder_attention_heads": 16,
  "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "use_cache": true, "is_encoder_decoder": true,
  "activation_function": "gelu", "d_model": 1024, "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0,
  "init_std": 0.02, "decoder_start_token_id": 0, "scale_embedding": true, "pad_token_id": 0, "eos_token_id": 1,
  "forced_eos_token_id": 1, "num_global_tokens": 32, "block_size": 512, "stagger_local_blocks": true
})";

// google/pegasus-x-base's and -large's config.json fields that differ from PegasusXConfig's defaults (the whole
// files: configs/pegasus-x-base, configs/pegasus-x-large).
constexpr const char* kPegasusXBaseShape = R"({
  "model_type": "pegasus_x", "activation_function": "relu", "dropout": 0.1, "attention_dropout": 0.1,
  "activation_dropout": 0.1, "num_global_tokens": 128, "d_model": 768, "encoder_layers": 12, "decoder_layers": 12,
  "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072, "encoder_attention_heads": 12, "decoder_attention_heads": 12
})";
constexpr const char* kPegasusXLargeShape = R"({
  "model_type": "pegasus_x", "activation_function": "relu", "dropout": 0.1, "attention_dropout": 0.1,
  "activation_dropout": 0.1, "num_global_tokens": 128
})";

constexpr BartStyleTokens kPegasusXTokens{0, 1, 0, 0, 1};

model::ModelConfig read_pegasus_x_config(const json& j, const std::string& model_type, const std::string& source) {
  // PegasusXConfig's defaults where PegasusConfig's differ (vocabulary, depth, 16k positions, scaled embeddings).
  json merged = json::parse(kPegasusXConfigAttributes);
  merged.update(j);
  model::ModelConfig c = read_bart_style_config(merged, model_type, kPegasusXTokens, source);
  c.normalize_before = true;
  c.final_layer_norm = true;
  c.layernorm_embedding = false;
  c.position_embedding = model::PositionEmbedding::computed;
  c.attention_bias = false;
  c.has_final_logits_bias = false;
  c.encoder_attention = model::EncoderAttention::global_local;
  c.block_size = field<std::int64_t>(merged, "block_size", 512, source);
  c.num_global_tokens = field<std::int64_t>(merged, "num_global_tokens", 32, source);
  c.stagger_local_blocks = field<bool>(merged, "stagger_local_blocks", true, source);
  return c;
}

void write_pegasus_x_config(const model::ModelConfig& c, json& j) {
  write_bart_style_config(c, j);
  j["block_size"] = c.block_size;
  j["num_global_tokens"] = c.num_global_tokens;
  j["stagger_local_blocks"] = c.stagger_local_blocks;
}

}  // namespace

const Family& pegasus_x_family() {
  static const Family family = [] {
    Family f;
    f.name = "PEGASUS-X";
    f.model_types = {
        {"pegasus_x", "PegasusXForConditionalGeneration", "PegasusXConfig", kPegasusXConfigAttributes}};
    f.read_config = read_pegasus_x_config;
    f.write_config = write_pegasus_x_config;
    f.derived_attributes = bart_style_derived_attributes;
    f.attribute_map = bart_style_attribute_map();
    // google/pegasus-x-* name PegasusTokenizer (the PEGASUS record, earlier in the registry, claims that class: the
    // same tokenizer); a folder naming only model_type pegasus_x reaches this record.
    f.tokenizer_class_prefixes = {"PegasusX"};
    f.tokenizer_files = {};
    f.load_tokenizer = load_tokenizer_of<tokenizer::PegasusTokenizer>;
    f.shapes = {{"pegasus-x-base", kPegasusXBaseShape}, {"pegasus-x-large", kPegasusXLargeShape}};
    return f;
  }();
  return family;
}

}  // namespace fitsum::families
