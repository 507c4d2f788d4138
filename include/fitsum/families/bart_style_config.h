// The config.json fields PegasusConfig and BartConfig share (transformers' PegasusConfig is BartConfig with other
// token ids): one reader and one writer for both families, which then set their own block layout.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fitsum/model/config.h"

namespace fitsum::families {

// The token ids where the two config classes' defaults differ; every other default is the same in both.
struct BartStyleTokens {
  std::int64_t pad, eos, bos, decoder_start, forced_eos;
};

// Reads the shared fields with their defaults and refuses LayerDrop (which fitsum does not implement); the caller
// sets the family's layout.
model::ModelConfig read_bart_style_config(const nlohmann::json& j, const std::string& model_type,
                                          const BartStyleTokens& tokens, const std::string& source);
void write_bart_style_config(const model::ModelConfig& c, nlohmann::json& j);
// BartConfig / PegasusConfig derive num_hidden_layers from encoder_layers.
nlohmann::json bart_style_derived_attributes(const nlohmann::json& attributes);
// Their attribute_map.
std::vector<std::pair<std::string, std::string>> bart_style_attribute_map();

}  // namespace fitsum::families
