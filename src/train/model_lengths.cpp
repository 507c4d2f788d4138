// Implements include/fitsum/train/model_lengths.h.
#include "fitsum/train/model_lengths.h"

#include "fitsum/families/family.h"

namespace fitsum::train {

void fit_lengths_to_model(data::DataOptions& data, const model::ModelConfig& config,
                          const tokenizer::Tokenizer* tokenizer, const std::function<void(const std::string&)>& warn) {
  for (const auto& warning : data::clamp_lengths_to_model(data, config.max_position_embeddings)) warn(warning);
  const auto prefix_family = families::source_prefix_family(config.model_type);
  if (const auto warning = data::source_prefix_warning(prefix_family, data); !warning.empty()) {
    warn(warning);
  }
  if (tokenizer != nullptr) {
    data.validate_for(*tokenizer);  // before any data is read
  } else {
    data.validate();
  }
}

std::vector<std::string> check_generation_for_model(const generate::GenerationOptions& generation,
                                                    const model::ModelConfig& config) {
  generation.validate_for(config);
  return generation.warnings();
}

}  // namespace fitsum::train
