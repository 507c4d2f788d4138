// Implements include/fitsum/io/hf_config.h. Defaults are those of transformers' PegasusConfig and BartConfig, so a
// config.json that omits a field means what it means to HF.
#include "fitsum/io/hf_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "fitsum/util/files.h"
#include "fitsum/util/python_numbers.h"

namespace fitsum::io {

namespace {

using nlohmann::json;

template <typename T>
T field(const json& j, const char* name, T fallback, const std::string& source) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    return fallback;
  }
  try {
    if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) throw std::invalid_argument("expected true or false");
    } else if constexpr (std::is_arithmetic_v<T>) {
      if (!it->is_number()) throw std::invalid_argument("expected a number");
      if constexpr (std::is_integral_v<T>) {
        if (!it->is_number_integer()) throw std::invalid_argument("expected an integer");
      }
    } else {
      if (!it->is_string()) throw std::invalid_argument("expected a string");
    }
    return it->get<T>();
  } catch (const std::exception& e) {
    throw std::invalid_argument(source + ": config field '" + name + "' has value " + it->dump() + ": " + e.what());
  }
}

// eos_token_id may be a list in newer configs; the first entry is the one generation stops on.
std::int64_t token_field(const json& j, const char* name, std::int64_t fallback, const std::string& source) {
  const auto it = j.find(name);
  if (it != j.end() && it->is_array()) {
    if (it->empty() || !(*it)[0].is_number_integer()) {
      throw std::invalid_argument(source + ": config field '" + name + "' must be an integer or a list of integers");
    }
    return (*it)[0].get<std::int64_t>();
  }
  return field<std::int64_t>(j, name, fallback, source);
}

// Token ids where PegasusConfig and BartConfig differ; every other default is the same in both.
struct TokenDefaults {
  std::int64_t pad, eos, bos, decoder_start, forced_eos;
};
constexpr TokenDefaults kPegasusTokens{0, 1, 0, 0, 1};
constexpr TokenDefaults kBartTokens{1, 2, 0, 2, 2};

// The block layout each family's HF model always has, whatever legacy fields (normalize_before,
// static_position_embeddings, add_final_layer_norm) say: PegasusModel and BartModel ignore those, so fitsum does too.
void set_family_layout(model::ModelConfig& c) {
  const bool bart = c.model_type == "bart";
  c.normalize_before = !bart;    // PEGASUS pre-LN, BART post-LN
  c.final_layer_norm = !bart;    // BART's stacks end without a LayerNorm
  c.layernorm_embedding = bart;  // BART normalises the embeddings
  c.position_embedding = bart ? model::PositionEmbedding::learned : model::PositionEmbedding::sinusoidal;
  c.learned_position_offset = 2;  // BartLearnedPositionalEmbedding's offset
}

// T5Config's defaults (t5-small) and MT5Config's (mt5-small: gated-gelu, untied), for fields a config.json leaves out.
struct T5Defaults {
  std::int64_t vocab_size, d_ff, num_layers, num_heads;
  const char* feed_forward_proj;
  bool tie_word_embeddings;
};
constexpr T5Defaults kT5Defaults{32128, 2048, 6, 8, "relu", true};
constexpr T5Defaults kMT5Defaults{250112, 1024, 8, 6, "gated-gelu", false};

// T5Config (v1.0, v1.1, FLAN-T5) and MT5Config (mT5, the same model under model_type "mt5"): their own field names.
model::ModelConfig t5_config_from_hf(const json& j, const std::string& model_type, const std::string& source) {
  const T5Defaults& d = model_type == "mt5" ? kMT5Defaults : kT5Defaults;
  model::ModelConfig c;
  c.model_type = model_type;
  c.vocab_size = field<std::int64_t>(j, "vocab_size", d.vocab_size, source);
  c.d_model = field<std::int64_t>(j, "d_model", 512, source);
  c.head_dim = field<std::int64_t>(j, "d_kv", 64, source);
  c.encoder_ffn_dim = c.decoder_ffn_dim = field<std::int64_t>(j, "d_ff", d.d_ff, source);
  c.encoder_layers = field<std::int64_t>(j, "num_layers", d.num_layers, source);
  c.decoder_layers = field<std::int64_t>(j, "num_decoder_layers", c.encoder_layers, source);
  c.encoder_attention_heads = c.decoder_attention_heads = field<std::int64_t>(j, "num_heads", d.num_heads, source);
  c.relative_attention_num_buckets = field<std::int64_t>(j, "relative_attention_num_buckets", 32, source);
  c.relative_attention_max_distance = field<std::int64_t>(j, "relative_attention_max_distance", 128, source);
  // T5 uses dropout_rate everywhere: after each block, on the attention probabilities, inside the feed-forward.
  c.dropout = c.attention_dropout = c.activation_dropout = field<double>(j, "dropout_rate", 0.1, source);
  c.layer_norm_eps = field<double>(j, "layer_norm_epsilon", 1e-6, source);
  c.init_std = field<double>(j, "initializer_factor", 1.0, source);
  // feed_forward_proj "relu" (v1.0) or "gated-gelu" (v1.1: gelu_new); explicit dense_act_fn / is_gated_act win, as
  // they do when PretrainedConfig sets the remaining fields after T5Config's own.
  const std::string projection = field<std::string>(j, "feed_forward_proj", d.feed_forward_proj, source);
  const bool gated = projection.rfind("gated-", 0) == 0;
  std::string activation = gated ? projection.substr(6) : projection;
  if (projection == "gated-gelu") activation = "gelu_new";
  c.gated_ffn = field<bool>(j, "is_gated_act", gated, source);
  c.activation_function = model::activation_from_string(field<std::string>(j, "dense_act_fn", activation, source));
  c.tie_word_embeddings = field<bool>(j, "tie_word_embeddings", d.tie_word_embeddings, source);
  c.pad_token_id = token_field(j, "pad_token_id", 0, source);
  c.eos_token_id = token_field(j, "eos_token_id", 1, source);
  c.bos_token_id = c.pad_token_id;  // T5 has no <s>
  c.decoder_start_token_id = token_field(j, "decoder_start_token_id", c.pad_token_id, source);
  c.forced_eos_token_id = token_field(j, "forced_eos_token_id", -1, source);
  // The architecture every T5 is: pre-RMSNorm, relative bias, no biases, unscaled scores, no embedding scale, and a
  // d_model^-0.5 rescale before a tied head. T5's nn.Embedding has no padding_idx.
  c.normalize_before = true;
  c.final_layer_norm = true;
  c.layernorm_embedding = false;
  c.position_embedding = model::PositionEmbedding::relative;
  c.module_layout = model::ModuleLayout::blocks;
  c.max_position_embeddings = model::kNoPositionLimit;
  c.normalization = model::Normalization::rms_norm;
  c.linear_bias = false;
  c.scale_attention_scores = false;
  c.scale_embedding = false;
  // transformers < 5 rescales exactly when the head is tied; transformers 5 writes the switch apart
  // (scale_decoder_outputs, false for v1.1) and saves v1.1 models as tied to model.shared when their head is. Its mT5
  // always ties (unless the checkpoint stores a different head) and never rescales; no released mT5 is tied.
  c.scale_decoder_outputs =
      field<bool>(j, "scale_decoder_outputs", model_type == "mt5" ? false : c.tie_word_embeddings, source);
  c.has_final_logits_bias = false;
  c.embedding_padding_idx = -1;
  return c;
}

void validate_config(const model::ModelConfig& c, const std::string& source) {
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
}

}  // namespace

model::ModelConfig model_config_from_hf(const json& j, const std::string& source) {
  if (!j.is_object()) {
    throw std::invalid_argument(source + ": a model config must be a JSON object");
  }
  const std::string model_type = field<std::string>(j, "model_type", "", source);
  if (model_type == "t5" || model_type == "mt5") {
    auto c = t5_config_from_hf(j, model_type, source);
    validate_config(c, source);
    return c;
  }
  if (model_type != "pegasus" && model_type != "bart") {
    throw std::invalid_argument(source + ": config field 'model_type' is '" + model_type +
                                "'; fitsum supports 'pegasus', 'bart', 't5' and 'mt5'");
  }
  model::ModelConfig c;
  c.model_type = model_type;
  const TokenDefaults& tokens = model_type == "bart" ? kBartTokens : kPegasusTokens;
  // PegasusConfig / BartConfig defaults.
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
  if (j.contains("embedding_padding_idx")) {  // fitsum's extension, see apply_config_overrides
    c.embedding_padding_idx = j["embedding_padding_idx"].is_null()
                                  ? -1
                                  : field<std::int64_t>(j, "embedding_padding_idx", c.pad_token_id, source);
  }

  set_family_layout(c);

  // Training-time features HF has and fitsum does not (yet): refuse rather than silently differ.
  for (const char* name : {"encoder_layerdrop", "decoder_layerdrop"}) {
    if (field<double>(j, name, 0.0, source) != 0.0) {
      throw std::invalid_argument(source + ": config field '" + name +
                                  "' is not 0; fitsum does not implement LayerDrop (set it to 0.0)");
    }
  }
  validate_config(c, source);
  return c;
}

model::ModelConfig read_model_config(const std::filesystem::path& path) {
  std::error_code error;
  const auto file = std::filesystem::is_directory(path, error) ? path / "config.json" : path;
  if (!std::filesystem::exists(std::filesystem::symlink_status(file, error))) {
    throw std::runtime_error("no config.json in '" + path.string() +
                             "'; pass a Hugging Face model folder (config.json plus weights)");
  }
  util::require_regular_file(file, "config.json");
  return model_config_from_hf(util::read_json_file(file), file.string());
}

namespace {

// T5's own field names; what T5Config.to_dict would write for them.
json t5_config_to_hf(const model::ModelConfig& c, json j) {
  if (!j.contains("architectures")) {
    j["architectures"] =
        json::array({c.model_type == "mt5" ? "MT5ForConditionalGeneration" : "T5ForConditionalGeneration"});
  }
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.d_model;
  j["d_kv"] = c.encoder_head_dim();
  j["d_ff"] = c.encoder_ffn_dim;
  j["num_layers"] = c.encoder_layers;
  j["num_decoder_layers"] = c.decoder_layers;
  j["num_heads"] = c.encoder_attention_heads;
  j["relative_attention_num_buckets"] = c.relative_attention_num_buckets;
  j["relative_attention_max_distance"] = c.relative_attention_max_distance;
  j["dropout_rate"] = c.dropout;
  j["layer_norm_epsilon"] = c.layer_norm_eps;
  j["initializer_factor"] = c.init_std;
  const std::string activation = model::to_string(c.activation_function);
  j["feed_forward_proj"] = c.gated_ffn ? (activation == "gelu_new" ? "gated-gelu" : "gated-" + activation) : activation;
  j["dense_act_fn"] = activation;
  j["is_gated_act"] = c.gated_ffn;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["scale_decoder_outputs"] = c.scale_decoder_outputs;  // transformers 5 reads it; earlier versions keep it as is
  j["pad_token_id"] = c.pad_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["decoder_start_token_id"] = c.decoder_start_token_id;
  j["is_encoder_decoder"] = true;
  return j;
}

}  // namespace

json model_config_to_hf(const model::ModelConfig& c, const json& original) {
  json j = original.is_object() ? original : json::object();
  j["model_type"] = c.model_type;
  if (c.module_layout == model::ModuleLayout::blocks) return t5_config_to_hf(c, std::move(j));
  if (!j.contains("architectures")) {
    j["architectures"] =
        json::array({c.model_type == "bart" ? "BartForConditionalGeneration" : "PegasusForConditionalGeneration"});
  }
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
  return j;
}

namespace {

// PretrainedConfig's own attributes (transformers 4.47), which every config object has whatever its config.json
// holds. The null ones exist too (update_from_string then refuses to set them).
constexpr const char* kPretrainedConfigAttributes = R"({
  "return_dict": true, "output_hidden_states": false, "output_attentions": false, "torchscript": false,
  "torch_dtype": null, "use_bfloat16": false, "tf_legacy_loss": false, "pruned_heads": {},
  "tie_word_embeddings": true, "chunk_size_feed_forward": 0, "is_encoder_decoder": false, "is_decoder": false,
  "cross_attention_hidden_size": null, "add_cross_attention": false, "tie_encoder_decoder": false,
  "max_length": 20, "min_length": 0, "do_sample": false, "early_stopping": false, "num_beams": 1,
  "num_beam_groups": 1, "diversity_penalty": 0.0, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "typical_p": 1.0,
  "repetition_penalty": 1.0, "length_penalty": 1.0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0,
  "bad_words_ids": null, "num_return_sequences": 1, "output_scores": false, "return_dict_in_generate": false,
  "forced_bos_token_id": null, "forced_eos_token_id": null, "remove_invalid_values": false,
  "exponential_decay_length_penalty": null, "suppress_tokens": null, "begin_suppress_tokens": null,
  "architectures": null, "finetuning_task": null, "id2label": {"0": "LABEL_0", "1": "LABEL_1"},
  "label2id": {"LABEL_0": 0, "LABEL_1": 1}, "tokenizer_class": null, "prefix": null, "bos_token_id": null,
  "pad_token_id": null, "eos_token_id": null, "sep_token_id": null, "decoder_start_token_id": null,
  "task_specific_params": null, "problem_type": null, "transformers_version": null, "_name_or_path": ""
})";

// The attributes each family's config class sets in its __init__, with its defaults (transformers 4.47).
constexpr const char* kPegasusConfigAttributes = R"({
  "vocab_size": 50265, "max_position_embeddings": 1024, "d_model": 1024, "encoder_ffn_dim": 4096,
  "encoder_layers": 12, "encoder_attention_heads": 16, "decoder_ffn_dim": 4096, "decoder_layers": 12,
  "decoder_attention_heads": 16, "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0,
  "activation_function": "gelu", "init_std": 0.02, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
  "use_cache": true, "scale_embedding": false, "is_encoder_decoder": true, "pad_token_id": 0, "eos_token_id": 1,
  "decoder_start_token_id": 0, "forced_eos_token_id": 1
})";
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
constexpr const char* kT5ConfigAttributes = R"({
  "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8,
  "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128, "dropout_rate": 0.1,
  "classifier_dropout": 0.0, "layer_norm_epsilon": 1e-06, "initializer_factor": 1.0, "feed_forward_proj": "relu",
  "use_cache": true, "is_encoder_decoder": true, "pad_token_id": 0, "eos_token_id": 1
})";
constexpr const char* kMT5ConfigAttributes = R"({
  "vocab_size": 250112, "d_model": 512, "d_kv": 64, "d_ff": 1024, "num_layers": 8, "num_heads": 6,
  "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128, "dropout_rate": 0.1,
  "classifier_dropout": 0.0, "layer_norm_epsilon": 1e-06, "initializer_factor": 1.0,
  "feed_forward_proj": "gated-gelu", "use_cache": true, "is_encoder_decoder": true, "tokenizer_class": "T5Tokenizer",
  "tie_word_embeddings": false, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0
})";

bool is_t5_family(const std::string& model_type) { return model_type == "t5" || model_type == "mt5"; }

// The attributes a family's __init__ derives from others, as that config object holds them: the values an
// override of their source must not change (HF updates the source after construction; the derived attribute stays).
json derived_attributes(const std::string& model_type, const json& attributes) {
  json derived = json::object();
  if (is_t5_family(model_type)) {
    derived["num_decoder_layers"] = attributes.at("num_layers");  // T5Config: None means num_layers
    const auto& proj = attributes.at("feed_forward_proj");
    const auto projection = proj.is_string() ? proj.get<std::string>() : std::string();
    const auto dash = projection.find('-');
    derived["dense_act_fn"] = projection == "gated-gelu" ? "gelu_new" : projection.substr(dash + 1);
    derived["is_gated_act"] = projection.rfind("gated-", 0) == 0;
  } else {
    derived["num_hidden_layers"] = attributes.at("encoder_layers");  // BartConfig / PegasusConfig
  }
  return derived;
}

// Every attribute of the config object transformers builds from `config_json` (PegasusConfig, BartConfig,
// T5Config, MT5Config): PretrainedConfig's, the family's defaults, config.json's fields over them (unknown fields
// become attributes too), then the derived ones config.json does not set. Empty for another model_type.
json config_object_attributes(const json& config_json) {
  const auto type = config_json.find("model_type");
  const std::string model_type = type != config_json.end() && type->is_string() ? type->get<std::string>() : "";
  const char* family = model_type == "pegasus" ? kPegasusConfigAttributes
                       : model_type == "bart"  ? kBartConfigAttributes
                       : model_type == "t5"    ? kT5ConfigAttributes
                       : model_type == "mt5"   ? kMT5ConfigAttributes
                                               : nullptr;
  if (family == nullptr) return json::object();
  json attributes = json::parse(kPretrainedConfigAttributes);
  attributes.update(json::parse(family));
  attributes.update(config_json);
  const json derived = derived_attributes(model_type, attributes);
  for (const auto& [key, value] : derived.items()) {
    if (!config_json.contains(key)) attributes[key] = value;
  }
  return attributes;
}

// attribute_map: names PretrainedConfig reads and writes as another attribute.
std::string mapped_attribute(const std::string& model_type, const std::string& key) {
  static const std::pair<const char*, const char*> t5[] = {{"hidden_size", "d_model"},
                                                           {"num_attention_heads", "num_heads"},
                                                           {"num_hidden_layers", "num_layers"},
                                                           {"head_dim", "d_kv"}};
  static const std::pair<const char*, const char*> bart[] = {{"num_attention_heads", "encoder_attention_heads"},
                                                             {"hidden_size", "d_model"}};
  if (is_t5_family(model_type)) {
    for (const auto& [alias, name] : t5) {
      if (key == alias) return name;
    }
  } else {
    for (const auto& [alias, name] : bart) {
      if (key == alias) return name;
    }
  }
  return key;
}

// update_from_string's parse: the attribute's current type decides.
json override_value(const json& current, const std::string& value) {
  if (current.is_boolean()) {
    std::string word = value;
    std::transform(word.begin(), word.end(), word.begin(), [](unsigned char c) { return std::tolower(c); });
    if (word == "true" || word == "1" || word == "y" || word == "yes") return true;
    if (word == "false" || word == "0" || word == "n" || word == "no") return false;
    throw std::invalid_argument("expected true or false (also 1/0, y/n, yes/no)");
  }
  if (current.is_number_integer()) return util::parse_python_int(value);
  if (current.is_number()) {
    const double number = util::parse_python_float(value);
    if (!std::isfinite(number)) throw std::invalid_argument("the number is not finite");
    return number;
  }
  if (current.is_string()) return value;
  throw std::invalid_argument("its value is " + current.dump() +
                              "; HF's update_from_string updates only int, float, bool or string values");
}

}  // namespace

void apply_config_overrides(json& config_json, const std::string& overrides) {
  const json attributes = config_object_attributes(config_json);
  const std::string model_type = attributes.value("model_type", std::string());
  // The derived attributes keep the values the config object was built with.
  const json derived = attributes.empty() ? json::object() : derived_attributes(model_type, attributes);
  for (const auto& [key, value] : derived.items()) {
    if (!config_json.contains(key)) config_json[key] = value;
  }
  std::size_t start = 0;
  while (start <= overrides.size()) {
    std::size_t end = overrides.find(',', start);
    if (end == std::string::npos) end = overrides.size();
    const std::string item = overrides.substr(start, end - start);
    start = end + 1;
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || item.find('=', eq + 1) != std::string::npos) {
      throw std::invalid_argument("config_overrides: '" + item +
                                  "' is not key=value; write key=value pairs separated by commas (e.g. "
                                  "dropout=0.0,attention_dropout=0.0)");
    }
    const std::string key = mapped_attribute(model_type, item.substr(0, eq));
    const std::string value = item.substr(eq + 1);
    try {
      if (key == "embedding_padding_idx") {  // fitsum's own field (see the header)
        config_json[key] = (value == "none" || value == "null") ? json(-1) : json(util::parse_python_int(value));
        continue;
      }
      if (key == "model_type") {
        throw std::invalid_argument(
            "the model type is the config class itself; HF's override would not change "
            "the model built");
      }
      const auto in_file = config_json.find(key);
      const auto in_object = attributes.find(key);
      if (in_file == config_json.end() && in_object == attributes.end()) {
        throw std::out_of_range("key " + key + " isn't in the original config dict");
      }
      config_json[key] = override_value(in_file != config_json.end() ? *in_file : *in_object, value);
    } catch (const std::out_of_range& e) {
      throw std::invalid_argument("config_overrides: " + std::string(e.what()) +
                                  " (config.json's fields and the attributes of the family's config class)");
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("config_overrides: cannot set '" + key + "' to '" + value + "': " + e.what());
    }
  }
}

json generation_config_from_hf(const json& config_json) {
  json g = json::object();
  g["_from_model_config"] = true;
  for (const char* key :
       {"bos_token_id", "decoder_start_token_id", "eos_token_id", "forced_eos_token_id", "pad_token_id",
        "length_penalty", "max_length", "min_length", "num_beams", "no_repeat_ngram_size", "early_stopping"}) {
    const auto it = config_json.find(key);
    if (it != config_json.end() && !it->is_null()) {
      g[key] = *it;
    }
  }
  return g;
}

}  // namespace fitsum::io
