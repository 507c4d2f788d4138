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

// Makes every integer and float option of `app` and of its subcommands read its value as Python's int() and float()
// do, which is what Hugging Face's argument parser does for its int and float fields (util/python_numbers.h): 010
// is 10, 0x10 is refused, 1_000 is 1000; a negative value for an unsigned option is refused. Called once, after
// the commands have registered their options.
void read_numbers_as_python(CLI::App& app);

// Every long option name of `command`, its option groups included.
std::vector<std::string> long_option_names(const CLI::App& command);

// The candidate a mistyped `word` most likely meant, or "" when none is close enough: the full name of an
// abbreviation HF users type (--lr: --learning_rate, --bs, --epochs, --grad_accum, ...), else the closest by edit
// distance, where a word of the name left out or added counts as one edit; on a tie, a name holding the word
// `preferred_word` ("train": --per_device_batch_size means --per_device_train_batch_size).
std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates,
                         const std::string& preferred_word = "");

// The flag of `command` (or of its option groups) that the unknown `name` most likely meant, or "" (nearest_name,
// preferring training flags in fitsum train and fitsum plan).
std::string suggested_flag(const CLI::App& command, const std::string& name);

}  // namespace fitsum::cli
