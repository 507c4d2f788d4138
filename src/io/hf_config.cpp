// Implements include/fitsum/io/hf_config.h: config.json's model_type picks the family (families/family.h), whose
// record reads and writes the fields; --config_overrides follows the family's config class.
#include "fitsum/io/hf_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "fitsum/families/config_fields.h"
#include "fitsum/families/family.h"
#include "fitsum/util/files.h"
#include "fitsum/util/python_numbers.h"

namespace fitsum::io {

namespace {

using nlohmann::json;

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
  const std::string model_type = families::field<std::string>(j, "model_type", "", source);
  const families::Family& family = families::family_for(model_type, source);
  auto c = family.read_config(j, model_type, source);
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

json model_config_to_hf(const model::ModelConfig& c, const json& original) {
  const families::Family& family = families::family_for(c.model_type, "the model's config");
  json j = original.is_object() ? original : json::object();
  j["model_type"] = c.model_type;
  if (!j.contains("architectures")) {
    j["architectures"] = json::array({families::find_model_type(c.model_type)->architecture});
  }
  family.write_config(c, j);
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

// Every attribute of the config object transformers builds from `config_json` (the family's config class for its
// model_type): PretrainedConfig's, the config class's defaults, config.json's fields over them (unknown fields
// become attributes too), then the derived ones config.json does not set. Empty for a model_type no family reads.
json config_object_attributes(const json& config_json) {
  const auto type = config_json.find("model_type");
  const std::string model_type = type != config_json.end() && type->is_string() ? type->get<std::string>() : "";
  const families::ModelType* entry = families::find_model_type(model_type);
  if (entry == nullptr) return json::object();
  json attributes = json::parse(kPretrainedConfigAttributes);
  attributes.update(json::parse(entry->config_attributes));
  attributes.update(config_json);
  const json derived = families::find_family(model_type)->derived_attributes(attributes);
  for (const auto& [key, value] : derived.items()) {
    if (!config_json.contains(key)) attributes[key] = value;
  }
  return attributes;
}

// attribute_map: names PretrainedConfig reads and writes as another attribute.
std::string mapped_attribute(const std::string& model_type, const std::string& key) {
  const families::Family* family = families::find_family(model_type);
  if (family == nullptr) return key;
  for (const auto& [alias, name] : family->attribute_map) {
    if (key == alias) return name;
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
  const json derived =
      attributes.empty() ? json::object() : families::find_family(model_type)->derived_attributes(attributes);
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

json with_class_token_ids(const json& config_json) {
  const json attributes = config_object_attributes(config_json);
  json out = config_json;
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id",
                          "forced_bos_token_id", "forced_eos_token_id"}) {
    const auto it = attributes.find(key);
    if (!config_json.contains(key) && it != attributes.end() && !it->is_null()) out[key] = *it;
  }
  return out;
}

json generation_config_from_hf(const json& file_json) {
  const json config_json = with_class_token_ids(file_json);
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
