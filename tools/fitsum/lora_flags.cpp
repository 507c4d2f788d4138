// Implements tools/fitsum/lora_flags.h.
#include "lora_flags.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "argument_text.h"

namespace fitsum::cli {

namespace {

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// PEFT's LoraConfig keys and the flags they become.
const std::vector<std::pair<std::string, std::string>>& lora_object_keys() {
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"r", "--lora_r"},
      {"lora_alpha", "--lora_alpha"},
      {"lora_dropout", "--lora_dropout"},
      {"target_modules", "--lora_target_modules"},
      {"bias", "--lora_bias"},
      {"modules_to_save", "--lora_modules_to_save"},
      {"use_rslora", "--use_rslora"}};
  return keys;
}

// A module list given as a JSON list or a comma string, as one comma-separated word.
std::string module_list_word(const nlohmann::json& value, const std::string& where) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) throw UsageError(where + " must be a list of module names or a comma-separated string");
  std::string word;
  for (const auto& element : value) {
    if (!element.is_string()) throw UsageError(where + " must list module names (strings), got " + element.dump());
    word += (word.empty() ? "" : ",") + element.get<std::string>();
  }
  if (word.empty()) throw UsageError(where + " is an empty list; leave it out (or null) for the family's default");
  return word;
}

// PEFT's LoraConfig(task_type="SEQ_2_SEQ_LM") and adapter_config.json's "peft_type": "LORA" say what fitsum trains
// anyway; any other value says a different model or method.
void check_peft_marker(const std::string& key, const nlohmann::json& value, const std::string& where) {
  const std::string expected = key == "task_type" ? "SEQ_2_SEQ_LM" : "LORA";
  if (value.is_null() || (value.is_string() && value.get<std::string>() == expected)) return;
  throw UsageError(where + " is " + value.dump() + "; fitsum trains LoRA adapters of sequence-to-sequence models (" +
                   key + " " + expected + ")");
}

std::vector<std::string> lora_object_words(const nlohmann::json& object, const std::string& file) {
  const std::string where = "'" + file + "': lora";
  if (!object.is_object()) {
    throw UsageError(where + " must be an object of PEFT LoraConfig fields, e.g. {\"r\": 16, \"lora_alpha\": 32}");
  }
  std::vector<std::string> words;
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string key_where = where + "." + it.key();
    if (it.key() == "task_type" || it.key() == "peft_type") {
      check_peft_marker(it.key(), it.value(), key_where);
      continue;
    }
    const auto& keys = lora_object_keys();
    const auto known = std::find_if(keys.begin(), keys.end(), [&](const auto& k) { return k.first == it.key(); });
    if (known == keys.end()) {
      std::string names;
      for (const auto& k : keys) names += (names.empty() ? "" : ", ") + k.first;
      throw UsageError(where + " has the unknown key '" + it.key() + "'; fitsum takes PEFT LoraConfig's " + names);
    }
    const auto& value = it.value();
    if (value.is_null()) continue;  // PEFT's default
    const auto& flag = known->second;
    if (it.key() == "target_modules" || it.key() == "modules_to_save") {
      words.insert(words.end(), {flag, module_list_word(value, key_where)});
    } else if (it.key() == "use_rslora") {
      if (!value.is_boolean()) throw UsageError(key_where + " must be true or false, got " + value.dump());
      words.push_back(flag + "=" + (value.get<bool>() ? "true" : "false"));
    } else if (it.key() == "bias") {
      if (!value.is_string()) throw UsageError(key_where + " must be \"none\", \"all\" or \"lora_only\"");
      words.insert(words.end(), {flag, value.get<std::string>()});
    } else {
      if (!value.is_number()) throw UsageError(key_where + " must be a number, got " + value.dump());
      words.insert(words.end(), {flag, value.dump()});
    }
  }
  return words;
}

}  // namespace

std::vector<std::string> module_name_list(const std::string& text, const std::string& flag) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    const auto name = trimmed(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (name.empty()) {
      throw UsageError(flag + " '" + text + "' has an empty module name; give names separated by commas, e.g. " +
                       "q_proj,v_proj");
    }
    names.push_back(name);
    if (comma == std::string::npos) return names;
    start = comma + 1;
  }
}

void add_lora_flags(CLI::App& g, model::LoraConfig& lora, std::string& base_dtype, std::string* adapter_name_or_path) {
  g.add_option("--lora_r", lora.r, "LoRA rank: train low-rank adapters of this rank on a frozen base (0: full "
                                   "fine-tuning)")
      ->capture_default_str();
  g.add_option("--lora_alpha", lora.lora_alpha, "LoRA scaling numerator: adapters are scaled by lora_alpha / lora_r")
      ->capture_default_str();
  g.add_option("--lora_dropout", lora.lora_dropout, "dropout on the adapters' input")->capture_default_str();
  g.add_option_function<std::string>(
      "--lora_target_modules",
      [&lora](const std::string& text) { lora.target_modules = module_name_list(text, "--lora_target_modules"); },
      "comma list of module names or suffixes to adapt (q_proj,v_proj; q,v for T5), or all-linear (default: the "
      "family's, as PEFT: q_proj,v_proj / q,v)");
  g.add_option_function<std::string>(
       "--lora_bias",
       [&lora](const std::string& text) {
         try {
           lora.bias = model::parse_lora_bias(text);
         } catch (const std::invalid_argument&) {
           throw UsageError("--lora_bias '" + text + "' is not one of none, all, lora_only");
         }
       },
       "none, all (every bias trains) or lora_only (the adapted layers' biases train)")
      ->default_str("none");
  g.add_option_function<std::string>(
      "--lora_modules_to_save",
      [&lora](const std::string& text) { lora.modules_to_save = module_name_list(text, "--lora_modules_to_save"); },
      "comma list of modules trained in full beside the adapters and saved with them");
  g.add_flag("--use_rslora", lora.use_rslora, "rank-stabilized scaling: lora_alpha / sqrt(lora_r)");
  g.add_option_function<std::string>(
       "--base_dtype",
       [&base_dtype](const std::string& text) {
         if (text != "float32" && text != "bfloat16") {
           throw UsageError("--base_dtype '" + text + "' is not one of float32, bfloat16");
         }
         base_dtype = text;
       },
       "with LoRA: bfloat16 holds the frozen base's Linear weights in bfloat16 (half their memory)")
      ->default_str("float32");
  if (adapter_name_or_path) {
    g.add_option("--adapter_name_or_path", *adapter_name_or_path,
                 "a PEFT adapter folder (adapter_config.json, adapter_model.safetensors) to continue training");
  }
}

std::optional<std::vector<std::string>> lora_json_arguments(const std::string& key, const nlohmann::json& value,
                                                            const std::string& file) {
  if (key == "lora") return lora_object_words(value, file);
  if ((key == "lora_target_modules" || key == "lora_modules_to_save") && value.is_array()) {
    return std::vector<std::string>{"--" + key, module_list_word(value, "'" + file + "': key '" + key + "'")};
  }
  return std::nullopt;
}

}  // namespace fitsum::cli
