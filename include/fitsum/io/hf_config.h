// Hugging Face config.json <-> ModelConfig. The family adapters live here: a PEGASUS config fills the switches of
// the one encoder-decoder implementation (pre-LN, sinusoidal positions, final LayerNorms, tied head). Whatever the
// model cannot honour is rejected with the config field's name.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "fitsum/model/config.h"

namespace fitsum::io {

// `source` names the file in error messages. Throws std::invalid_argument for unsupported or inconsistent fields.
model::ModelConfig model_config_from_hf(const nlohmann::json& config_json, const std::string& source);

// Reads DIR/config.json (or a config file path).
model::ModelConfig read_model_config(const std::filesystem::path& path);

// The config.json that HF would write for `config`, keeping every field of `original` (ids, labels, generation
// settings, ...) and overwriting the architecture fields fitsum knows.
nlohmann::json model_config_to_hf(const model::ModelConfig& config, const nlohmann::json& original = {});

// generation_config.json as HF's GenerationConfig.from_model_config derives it from config.json.
nlohmann::json generation_config_from_hf(const nlohmann::json& config_json);

}  // namespace fitsum::io
