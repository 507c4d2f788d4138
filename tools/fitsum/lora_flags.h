// The LoRA flags (PEFT's LoraConfig names with a lora_ prefix where PEFT has none: --lora_r, --lora_target_modules,
// --lora_bias, --lora_modules_to_save), registered once for `fitsum train`, `fitsum plan` and `fitsum bench train`,
// and the args JSON's `lora` object (PEFT's own keys: r, lora_alpha, target_modules, ...) turned into those flags.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "fitsum/model/lora.h"

namespace fitsum::cli {

// --lora_r, --lora_alpha, --lora_dropout, --lora_target_modules, --lora_bias, --lora_modules_to_save, --use_rslora,
// --base_dtype, and (where `adapter_name_or_path` is given) --adapter_name_or_path.
void add_lora_flags(CLI::App& group, model::LoraConfig& lora, std::string& base_dtype,
                    std::string* adapter_name_or_path);

// "q_proj, v_proj" as {"q_proj", "v_proj"}; throws UsageError naming `flag` for an empty name.
std::vector<std::string> module_name_list(const std::string& text, const std::string& flag);

// The command-line words of an args JSON entry that needs more than append_json_value's rules: the `lora` object
// (PEFT's LoraConfig keys; an unknown key is an error naming it) and the module lists given as JSON lists. Nothing
// for the other keys. `file` names the JSON file in errors.
std::optional<std::vector<std::string>> lora_json_arguments(const std::string& key, const nlohmann::json& value,
                                                            const std::string& file);

}  // namespace fitsum::cli
