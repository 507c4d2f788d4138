// The command line as Hugging Face users type it, turned into what CLI11 parses: `--learning-rate` for
// `--learning_rate`, `--gradient_checkpointing True` for the flag, and unknown commands or flags refused with the
// nearest known name ("did you mean --per_device_train_batch_size?").
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace fitsum::cli {

// A command line that cannot be parsed: main() prints it and exits 2.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// `args` start with the subcommand's name. Returns them with dashed names replaced by their underscore spelling
// and flags followed by a boolean word (True, false, 1, ...) joined as `--flag=value`. Throws UsageError for an
// unknown subcommand or flag, naming the nearest known one where one is close.
std::vector<std::string> normalize_arguments(const CLI::App& app, const std::vector<std::string>& args);

// The boolean words of Hugging Face's parser: true/false, 1/0, yes/no, in any case; throws UsageError naming `flag`
// for anything else.
bool parse_boolean_word(const std::string& word, const std::string& flag);

// Every long option name of `command`, its option groups included.
std::vector<std::string> long_option_names(const CLI::App& command);

// The candidate closest to `word` by edit distance, or "" when none is close enough to be a likely typo.
std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace fitsum::cli
