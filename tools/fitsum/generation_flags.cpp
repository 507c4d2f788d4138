// Implements tools/fitsum/generation_flags.h.
#include "generation_flags.h"

#include <stdexcept>

#include "fitsum/train/training_arguments.h"

namespace fitsum::cli {

void add_generation_flags(CLI::App& cmd, GenerationFlags& f) {
  cmd.add_option_function<std::int64_t>(
      "--num_beams", [&f](const std::int64_t& v) { f.num_beams = v; }, "beams per source (1: greedy search)");
  cmd.add_option_function<double>(
      "--length_penalty", [&f](const double& v) { f.length_penalty = v; },
      "beam search: score = sum of log-probs / length^length_penalty");
  cmd.add_option_function<std::int64_t>(
      "--max_length", [&f](const std::int64_t& v) { f.max_length = v; },
      "longest output, counting the decoder start token");
  cmd.add_option_function<std::int64_t>(
      "--max_new_tokens", [&f](const std::int64_t& v) { f.max_new_tokens = v; },
      "longest output in new tokens (wins over --max_length)");
  cmd.add_option_function<std::int64_t>(
      "--min_length", [&f](const std::int64_t& v) { f.min_length = v; }, "eos is banned below this length");
  cmd.add_option_function<std::int64_t>(
      "--no_repeat_ngram_size", [&f](const std::int64_t& v) { f.no_repeat_ngram_size = v; },
      "no n-gram of this size twice in an output");
  cmd.add_option_function<std::string>(
      "--early_stopping", [&f](const std::string& v) { f.early_stopping = v; },
      "beam search stop rule: false (HF default), true, never");
  cmd.add_option_function<std::string>(
      "--beam_length", [&f](const std::string& v) { f.beam_length = v; },
      "beam search length normalisation: generated (transformers >= 4.37, default), classic (< 4.36)");
  cmd.add_flag("--no_cache", f.no_cache, "decode without the key/value cache (slower; same tokens)");
}

void GenerationFlags::overlay(generate::GenerationOptions& o) const {
  if (num_beams) o.num_beams = *num_beams;
  if (length_penalty) o.length_penalty = *length_penalty;
  if (max_length) o.max_length = *max_length;
  if (max_new_tokens) o.max_new_tokens = *max_new_tokens;
  if (min_length) o.min_length = *min_length;
  if (no_repeat_ngram_size) o.no_repeat_ngram_size = *no_repeat_ngram_size;
  if (early_stopping) {
    if (*early_stopping == "true" || *early_stopping == "True") {
      o.early_stopping = generate::EarlyStopping::on_full;
    } else if (*early_stopping == "false" || *early_stopping == "False") {
      o.early_stopping = generate::EarlyStopping::heuristic;
    } else if (*early_stopping == "never") {
      o.early_stopping = generate::EarlyStopping::never;
    } else {
      throw std::invalid_argument("--early_stopping '" + *early_stopping + "' is not one of true, false, never");
    }
  }
  if (beam_length) o.beam_length = generate::parse_beam_length(*beam_length, "--beam_length");
  if (no_cache) o.use_cache = false;
}

void GenerationFlags::apply(generate::GenerationOptions& o) const {
  overlay(o);
  o.validate();
}

void GenerationFlags::validate_values() const {
  generate::GenerationOptions o;
  overlay(o);
  o.validate_values();
}

void validate_evaluation_flags(std::int64_t batch_size, const data::DataOptions& data,
                               const GenerationFlags& generation) {
  if (batch_size < 1 || batch_size > train::TrainingArguments::kMaxBatchSize) {
    throw std::invalid_argument("--per_device_eval_batch_size must be in [1, " +
                                std::to_string(train::TrainingArguments::kMaxBatchSize) + "], got " +
                                std::to_string(batch_size));
  }
  data.validate_values();
  generation.validate_values();
}

}  // namespace fitsum::cli
