// Hugging Face arguments that fitsum has no flag of its own for: every other field of TrainingArguments /
// Seq2SeqTrainingArguments (transformers 4.47) and of run_summarization.py's ModelArguments / DataTrainingArguments.
// Each is a known name, so a recipe written for HF parses. A value that means what fitsum does anyway (HF's default,
// or a setting with no effect on fitsum's results, such as dataloader_num_workers) is accepted; any other value is
// refused by name with "not supported by fitsum" and, where there is one, the fitsum way.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace fitsum::cli {

// Registers the arguments on `command` as hidden options that check their value when parsed.
void add_hf_compatibility_arguments(CLI::App& command);

// The names (without "--") of all arguments in the table, for tests and suggestions.
std::vector<std::string> hf_compatibility_argument_names();

}  // namespace fitsum::cli
