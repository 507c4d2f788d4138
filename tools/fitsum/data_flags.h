// The data flags, registered once for every command that reads datasets (tokenize now; train and eval as they
// land), with run_summarization.py's and Seq2SeqTrainingArguments' names and defaults, filling a typed
// fitsum::data::DataOptions.
#pragma once

#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "fitsum/data/dataset.h"

namespace fitsum::cli {

// --text_column, --summary_column, --max_source_length, --max_target_length, --source_prefix, --skip_bad_records
void add_tokenization_flags(CLI::App& command, data::DataOptions& options);

// --tokenizer_name: the folder whose spiece.model or tokenizer.json tokenizes text records (default: the model's)
void add_tokenizer_name_flag(CLI::App& command, std::string& tokenizer_name);

// --max_train_samples, --max_eval_samples
void add_sample_limit_flags(CLI::App& command, data::DataOptions& options);

// --pad_to_multiple_of, --group_by_length, --max_tokens_per_batch
void add_batching_flags(CLI::App& command, data::DataOptions& options);

// "fitsum: warning: <line>" on stderr: how the commands that read data print the library's warnings.
void print_warning(const std::string& line);

// Reads `model_dir`/config.json (when there is one) as io/hf_config.h reads it for training, and lowers the maximum
// lengths to its max_position_embeddings (Hugging Face's default where it names none), printing a warning for each
// change.
void clamp_lengths_to_model_config(data::DataOptions& options, const std::filesystem::path& model_dir);

}  // namespace fitsum::cli
