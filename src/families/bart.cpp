// BART (transformers' BartForConditionalGeneration): post-LN blocks, LayerNorm on the embeddings, no final
// LayerNorm, learned positions with an offset of 2, GPT-2's byte-level BPE tokenizer with <s> text </s>.
#include "fitsum/families/bart_style_config.h"
#include "fitsum/families/family.h"
#include "fitsum/tokenizer/bart_tokenizer.h"

namespace fitsum::families {

namespace {

using nlohmann::json;

// transformers 4.47's BartConfig.__init__ attributes and defaults.
constexpr const char* kBartConfigAttributes = R"({
  "vocab_size": 50265, "max_position_embeddings": 1024, "d_model": 1024, "encoder_ffn_dim": 4096,
  "encoder_layers": 12, "encoder_attention_heads": 16, "decoder_ffn_dim": 4096, "decoder_layers": 12,
  "decoder_attention_heads": 16, "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0,
  "activation_function": "gelu", "init_std": 0.02, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
  "classifier_dropout": 0.0, "use_cache": true, "scale_embedding": false, "is_encoder_decoder": true,
  "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2, "forced_eos_token_id": 2,
  "id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"},
  "label2id": {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2}
})";

constexpr BartStyleTokens kBartTokens{1, 2, 0, 2, 2};

// BartModel's layout whatever legacy fields (normalize_before, static_position_embeddings, add_final_layer_norm)
// say: transformers ignores those, so fitsum does too.
model::ModelConfig read_bart_config(const json& j, const std::string& model_type, const std::string& source) {
  model::ModelConfig c = read_bart_style_config(j, model_type, kBartTokens, source);
  c.normalize_before = false;    // post-LN
  c.final_layer_norm = false;    // the stacks end without a LayerNorm
  c.layernorm_embedding = true;  // the embeddings are normalised
  c.position_embedding = model::PositionEmbedding::learned;
  c.learned_position_offset = 2;  // BartLearnedPositionalEmbedding's offset
  return c;
}

}  // namespace

const Family& bart_family() {
  static const Family family = [] {
    Family f;
    f.name = "BART";
    f.model_types = {{"bart", "BartForConditionalGeneration", "BartConfig", kBartConfigAttributes}};
    f.read_config = read_bart_config;
    f.write_config = write_bart_style_config;
    f.derived_attributes = bart_style_derived_attributes;
    f.attribute_map = bart_style_attribute_map();
    // BART's tokenizer is GPT-2's byte-level BPE, which RoBERTa's and GPT-2's own tokenizer folders also hold.
    f.tokenizer_class_prefixes = {"Bart", "Roberta", "GPT2"};
    f.tokenizer_files = {"vocab.json", "tokenizer.json"};
    f.load_tokenizer = load_tokenizer_of<tokenizer::BartTokenizer>;
    f.text_starts_with_bos = true;
    return f;
  }();
  return family;
}

}  // namespace fitsum::families
