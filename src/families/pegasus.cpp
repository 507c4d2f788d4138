// PEGASUS (transformers' PegasusForConditionalGeneration): BART's config fields with its own token ids, pre-LN
// blocks with final LayerNorms, sinusoidal positions, a SentencePiece tokenizer with 103 reserved ids.
#include "fitsum/families/bart_style_config.h"
#include "fitsum/families/family.h"
#include "fitsum/tokenizer/pegasus_tokenizer.h"

namespace fitsum::families {

namespace {

using nlohmann::json;

// transformers 4.47's PegasusConfig.__init__ attributes and defaults.
constexpr const char* kPegasusConfigAttributes = R"({
  "vocab_size": 50265, "max_position_embeddings": 1024, "d_model": 1024, "encoder_ffn_dim": 4096,
  "encoder_layers": 12, "encoder_attention_heads": 16, "decoder_ffn_dim": 4096, "decoder_layers": 12,
  "decoder_attention_heads": 16, "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0,
  "activation_function": "gelu", "init_std": 0.02, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
  "use_cache": true, "scale_embedding": false, "is_encoder_decoder": true, "pad_token_id": 0, "eos_token_id": 1,
  "decoder_start_token_id": 0, "forced_eos_token_id": 1
})";

constexpr BartStyleTokens kPegasusTokens{0, 1, 0, 0, 1};

// PegasusModel's layout whatever legacy fields (normalize_before, static_position_embeddings,
// add_final_layer_norm) say: transformers ignores those, so fitsum does too.
model::ModelConfig read_pegasus_config(const json& j, const std::string& model_type, const std::string& source) {
  model::ModelConfig c = read_bart_style_config(j, model_type, kPegasusTokens, source);
  c.normalize_before = true;
  c.final_layer_norm = true;
  c.layernorm_embedding = false;
  c.position_embedding = model::PositionEmbedding::sinusoidal;
  c.learned_position_offset = 2;
  return c;
}

}  // namespace

const Family& pegasus_family() {
  static const Family family = [] {
    Family f;
    f.name = "PEGASUS";
    f.model_types = {{"pegasus", "PegasusForConditionalGeneration", "PegasusConfig", kPegasusConfigAttributes}};
    f.read_config = read_pegasus_config;
    f.write_config = write_bart_style_config;
    f.derived_attributes = bart_style_derived_attributes;
    f.attribute_map = bart_style_attribute_map();
    f.tokenizer_class_prefixes = {"Pegasus"};
    f.tokenizer_files = {"spiece.model"};  // spiece.model alone: the family fitsum has always assumed for it
    f.load_tokenizer = load_tokenizer_of<tokenizer::PegasusTokenizer>;
    return f;
  }();
  return family;
}

}  // namespace fitsum::families
