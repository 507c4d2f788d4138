// Implements data_flags.h.
#include "data_flags.h"

#include <iostream>
#include <stdexcept>

#include "fitsum/io/hf_config.h"

namespace fitsum::cli {

void add_tokenizer_name_flag(CLI::App& command, std::string& tokenizer_name) {
  command.add_option("--tokenizer_name", tokenizer_name,
                     "folder with the tokenizer files (spiece.model, tokenizer.json or vocab.json + merges.txt), "
                     "or Hub id (default: the model's)");
}

void add_tokenization_flags(CLI::App& command, data::DataOptions& options) {
  command.add_option("--text_column", options.text_column, "Column holding the text to summarize")
      ->capture_default_str();
  command.add_option("--summary_column", options.summary_column, "Column holding the reference summary")
      ->capture_default_str();
  command
      .add_option("--max_source_length", options.max_source_length,
                  "Longest input in tokens, </s> included; longer texts are truncated (lowered to the model's "
                  "max_position_embeddings)")
      ->capture_default_str();
  command
      .add_option("--max_target_length", options.max_target_length,
                  "Longest summary in tokens, </s> included; longer summaries are truncated")
      ->capture_default_str();
  command.add_option("--source_prefix", options.source_prefix,
                     "text put before every input, e.g. \"summarize: \" for T5");
  command.add_flag("--skip_bad_records", options.skip_bad_records,
                   "Skip and count malformed records instead of stopping at the first one");
}

void add_sample_limit_flags(CLI::App& command, data::DataOptions& options) {
  command.add_option_function<std::int64_t>(
      "--max_train_samples", [&options](const std::int64_t& value) { options.max_train_samples = value; },
      "Use only the first N training examples");
  command.add_option_function<std::int64_t>(
      "--max_eval_samples", [&options](const std::int64_t& value) { options.max_eval_samples = value; },
      "Use only the first N evaluation examples");
}

void add_batching_flags(CLI::App& command, data::DataOptions& options) {
  command.add_option_function<std::int64_t>(
      "--pad_to_multiple_of", [&options](const std::int64_t& value) { options.pad_to_multiple_of = value; },
      "Pad every batch's lengths up to a multiple of N");
  command.add_flag("--group_by_length", options.group_by_length,
                   "Batch examples of similar length together (HF LengthGroupedSampler)");
  // transformers 5 names the sampler with one choice where 4.x had the --group_by_length switch.
  command
      .add_option_function<std::string>(
          "--train_sampling_strategy",
          [&options](const std::string& value) {
            if (value == "group_by_length") {
              options.group_by_length = true;
            } else if (value != "random") {
              throw std::invalid_argument("--train_sampling_strategy " + value +
                                          " is not supported: fitsum samples as 'random' (transformers' "
                                          "RandomSampler through accelerate, the default) or 'group_by_length'");
            }
          },
          "transformers 5's sampler choice: random (the default) or group_by_length (as --group_by_length)")
      ->check(CLI::IsMember({"random", "sequential", "group_by_length", "batch_rebalance"}));
  command.add_option_function<std::int64_t>(
      "--max_tokens_per_batch", [&options](const std::int64_t& value) { options.max_tokens_per_batch = value; },
      "Fill batches up to N padded tokens instead of a fixed number of examples");
}

void print_warning(const std::string& line) { std::cerr << "fitsum: warning: " << line << "\n"; }

void clamp_lengths_to_model_config(data::DataOptions& options, const std::filesystem::path& model_dir) {
  const std::filesystem::path config_file = model_dir / "config.json";
  std::error_code error;
  if (!std::filesystem::is_regular_file(config_file, error)) return;
  // config.json as fitsum train reads it, so that both lower the lengths alike: a PEGASUS or BART config without
  // max_position_embeddings has Hugging Face's default, 1024.
  const auto config = io::read_model_config(config_file);
  for (const auto& warning : data::clamp_lengths_to_model(options, config.max_position_embeddings)) {
    print_warning(warning);
  }
}

}  // namespace fitsum::cli
