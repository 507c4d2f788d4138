// The decoding flags of `eval` and `summarize` (HF generate() argument names). Only the flags a user gives
// override the model folder's generation_config.json / config.json, as explicit generate() arguments do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "fitsum/data/dataset.h"
#include "fitsum/generate/options.h"

namespace fitsum::cli {

struct GenerationFlags {
  std::optional<std::int64_t> num_beams;
  std::optional<double> length_penalty;
  std::optional<std::int64_t> max_length;
  std::optional<std::int64_t> max_new_tokens;
  std::optional<std::int64_t> min_length;
  std::optional<std::int64_t> no_repeat_ngram_size;
  std::optional<std::string> early_stopping;  // true, false, never
  std::optional<std::string> beam_length;
  bool no_cache = false;

  // Overrides `options` with the flags that were given, then validates.
  void apply(generate::GenerationOptions& options) const;
  // The given flags each on its own (GenerationOptions::validate_values), before any model folder is read.
  void validate_values() const;

 private:
  void overlay(generate::GenerationOptions& options) const;
};

void add_generation_flags(CLI::App& command, GenerationFlags& flags);

// The numbers of `fitsum eval` and `fitsum summarize`, before anything is read: the batch size (as
// TrainingArguments bounds per_device_eval_batch_size), the data flags (DataOptions::validate_values) and the
// decoding flags. Throws std::invalid_argument naming the flag.
void validate_evaluation_flags(std::int64_t batch_size, const data::DataOptions& data,
                               const GenerationFlags& generation);

}  // namespace fitsum::cli
