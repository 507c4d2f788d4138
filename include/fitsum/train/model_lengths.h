// The lengths a run asks of a model, checked one way by every command that reads data or decodes with it
// (`fitsum train` through prepare_training / plan_training, `fitsum eval`, `fitsum summarize`, `fitsum tokenize`):
// max_source_length and max_target_length are lowered to the model's positions, as run_summarization.py lowers
// them, and the decoding options must fit its vocabulary and positions.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "fitsum/data/dataset.h"
#include "fitsum/generate/options.h"
#include "fitsum/model/config.h"
#include "fitsum/tokenizer/tokenizer.h"

namespace fitsum::train {

// Lowers max_source_length / max_target_length above the model's max_position_embeddings to it (a warning each,
// data::clamp_lengths_to_model), warns for a T5 model without source_prefix (data::source_prefix_warning, the family from the registry),
// each given to `warn` as it is found, then validates the data options: against `tokenizer`'s template where one is
// given (DataOptions::validate_for), else on their own (DataOptions::validate). Throws std::invalid_argument.
void fit_lengths_to_model(data::DataOptions& data, const model::ModelConfig& config,
                          const tokenizer::Tokenizer* tokenizer, const std::function<void(const std::string&)>& warn);

// The decoding options against the model (GenerationOptions::validate_for: its ids and num_beams within the
// vocabulary, max_length within its positions); returns generate()'s warnings (GenerationOptions::warnings).
std::vector<std::string> check_generation_for_model(const generate::GenerationOptions& generation,
                                                    const model::ModelConfig& config);

}  // namespace fitsum::train
