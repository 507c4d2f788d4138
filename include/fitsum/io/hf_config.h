// Hugging Face config.json <-> ModelConfig. config.json's model_type picks the family (families/family.h), whose
// record knows the field names and defaults: a PEGASUS config fills the switches of the one encoder-decoder
// implementation (pre-LN, sinusoidal positions, final LayerNorms, tied head). Whatever the model cannot honour is
// rejected with the config field's name.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "fitsum/model/config.h"

namespace fitsum::io {

// `source` names the file in error messages. Throws std::invalid_argument for unsupported or inconsistent fields,
// and for a model_type no family reads (the message lists the supported ones).
model::ModelConfig model_config_from_hf(const nlohmann::json& config_json, const std::string& source);

// Reads DIR/config.json (or a config file path).
model::ModelConfig read_model_config(const std::filesystem::path& path);

// The config.json that HF would write for `config`, keeping every field of `original` (ids, labels, generation
// settings, ...) and overwriting the architecture fields fitsum knows; "architectures", when `original` has none, is
// the family's transformers class. Throws std::invalid_argument for a model_type no family reads.
nlohmann::json model_config_to_hf(const model::ModelConfig& config, const nlohmann::json& original = {});

// HF's --config_overrides ("dropout=0.0,attention_dropout=0.0"): each value takes the JSON type of the field it
// replaces (bool, integer, float, string; "none"/"null" clears it). A key config.json does not have is an error,
// except fitsum's own `embedding_padding_idx` (-1 or none: embedding lookups of the pad token get gradients, as
// in the plain reference that computed the fixtures; default: HF's padding_idx = pad_token_id).
void apply_config_overrides(nlohmann::json& config_json, const std::string& overrides);

// config.json with the token ids generate() reads (bos, eos, pad, decoder start, forced bos and eos) that it leaves
// out taken from its config class's defaults, as transformers' config object holds them (PegasusConfig's
// eos_token_id 1, BartConfig's forced_eos_token_id 2, ...); unchanged for a model_type no family reads.
nlohmann::json with_class_token_ids(const nlohmann::json& config_json);

// generation_config.json as HF's GenerationConfig.from_model_config derives it from config.json (and the config
// class's token ids, with_class_token_ids).
nlohmann::json generation_config_from_hf(const nlohmann::json& config_json);

}  // namespace fitsum::io
