// Implements include/fitsum/families/bart_style_config.h. Defaults are those of transformers' PegasusConfig and
// BartConfig, so a config.json that omits a field means what it means to HF.
#include "fitsum/families/bart_style_config.h"

#include <stdexcept>

#include "fitsum/families/config_fields.h"

namespace fitsum::families {

using nlohmann::json;

model::ModelConfig read_bart_style_config(const json& j, const std::string& model_type, const BartStyleTokens& tokens,
                                          const std::string& source) {
  model::ModelConfig c;
  c.model_type = model_type;
  c.vocab_size = field<std::int64_t>(j, "vocab_size", 50265, source);
  c.d_model = field<std::int64_t>(j, "d_model", 1024, source);
  c.encoder_layers = field<std::int64_t>(j, "encoder_layers", 12, source);
  c.decoder_layers = field<std::int64_t>(j, "decoder_layers", 12, source);
  c.encoder_attention_heads = field<std::int64_t>(j, "encoder_attention_heads", 16, source);
  c.decoder_attention_heads = field<std::int64_t>(j, "decoder_attention_heads", 16, source);
  c.encoder_ffn_dim = field<std::int64_t>(j, "encoder_ffn_dim", 4096, source);
  c.decoder_ffn_dim = field<std::int64_t>(j, "decoder_ffn_dim", 4096, source);
  c.max_position_embeddings = field<std::int64_t>(j, "max_position_embeddings", 1024, source);
  c.activation_function = model::activation_from_string(field<std::string>(j, "activation_function", "gelu", source));
  c.dropout = field<double>(j, "dropout", 0.1, source);
  c.attention_dropout = field<double>(j, "attention_dropout", 0.0, source);
  c.activation_dropout = field<double>(j, "activation_dropout", 0.0, source);
  c.init_std = field<double>(j, "init_std", 0.02, source);
  c.scale_embedding = field<bool>(j, "scale_embedding", false, source);
  c.tie_word_embeddings = field<bool>(j, "tie_word_embeddings", true, source);
  c.pad_token_id = token_field(j, "pad_token_id", tokens.pad, source);
  c.eos_token_id = token_field(j, "eos_token_id", tokens.eos, source);
  c.bos_token_id = token_field(j, "bos_token_id", tokens.bos, source);
  c.decoder_start_token_id = token_field(j, "decoder_start_token_id", tokens.decoder_start, source);
  c.forced_eos_token_id = token_field(j, "forced_eos_token_id", tokens.forced_eos, source);
  c.embedding_padding_idx = c.pad_token_id;
  if (j.contains("embedding_padding_idx")) {  // fitsum's extension, see io::apply_config_overrides
    c.embedding_padding_idx = j["embedding_padding_idx"].is_null()
                                  ? -1
                                  : field<std::int64_t>(j, "embedding_padding_idx", c.pad_token_id, source);
  }
  // Training-time features HF has and fitsum does not (yet): refuse rather than silently differ.
  for (const char* name : {"encoder_layerdrop", "decoder_layerdrop"}) {
    if (field<double>(j, name, 0.0, source) != 0.0) {
      throw std::invalid_argument(source + ": config field '" + name +
                                  "' is not 0; fitsum does not implement LayerDrop (set it to 0.0)");
    }
  }
  return c;
}

void write_bart_style_config(const model::ModelConfig& c, json& j) {
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.d_model;
  j["encoder_layers"] = c.encoder_layers;
  j["decoder_layers"] = c.decoder_layers;
  j["num_hidden_layers"] = c.encoder_layers;
  j["encoder_attention_heads"] = c.encoder_attention_heads;
  j["decoder_attention_heads"] = c.decoder_attention_heads;
  j["encoder_ffn_dim"] = c.encoder_ffn_dim;
  j["decoder_ffn_dim"] = c.decoder_ffn_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["activation_function"] = model::to_string(c.activation_function);
  j["dropout"] = c.dropout;
  j["attention_dropout"] = c.attention_dropout;
  j["activation_dropout"] = c.activation_dropout;
  j["init_std"] = c.init_std;
  j["scale_embedding"] = c.scale_embedding;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["pad_token_id"] = c.pad_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["bos_token_id"] = c.bos_token_id;
  j["decoder_start_token_id"] = c.decoder_start_token_id;
  if (c.forced_eos_token_id >= 0) {
    j["forced_eos_token_id"] = c.forced_eos_token_id;
  }
  j["is_encoder_decoder"] = true;
  if (c.embedding_padding_idx != c.pad_token_id) {
    j["embedding_padding_idx"] = c.embedding_padding_idx;
  } else {
    j.erase("embedding_padding_idx");
  }
}

json bart_style_derived_attributes(const json& attributes) {
  json derived = json::object();
  derived["num_hidden_layers"] = attributes.at("encoder_layers");
  return derived;
}

std::vector<std::pair<std::string, std::string>> bart_style_attribute_map() {
  return {{"num_attention_heads", "encoder_attention_heads"}, {"hidden_size", "d_model"}};
}

}  // namespace fitsum::families
