// T5's config.json fields (T5Config, MT5Config, LongT5Config share them): one reader and one writer for the T5 and
// LongT5 families.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "fitsum/model/config.h"

namespace fitsum::families {

// T5's fields with T5Config's defaults (MT5Config's for model_type "mt5"), and T5's layout (the blocks layout,
// relative positions, RMSNorm, no biases); `source` names the file in errors.
model::ModelConfig read_t5_config(const nlohmann::json& j, const std::string& model_type, const std::string& source);
void write_t5_config(const model::ModelConfig& c, nlohmann::json& j);
// T5Config derives num_decoder_layers, dense_act_fn and is_gated_act from others.
nlohmann::json t5_derived_attributes(const nlohmann::json& attributes);

}  // namespace fitsum::families
