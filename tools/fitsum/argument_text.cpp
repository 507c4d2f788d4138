// Implements tools/fitsum/argument_text.h.
#include "argument_text.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <tuple>

#include <nlohmann/json.hpp>

#include "fitsum/util/python_numbers.h"

namespace fitsum::cli {

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

bool is_boolean_word(const std::string& word) {
  static const char* const words[] = {"true", "false", "1", "0", "yes", "no"};
  const auto w = lower(word);
  return std::any_of(std::begin(words), std::end(words), [&w](const char* known) { return w == known; });
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The words of a flag's name ("--per_device_train_batch_size": per, device, train, batch, size).
std::vector<std::string> name_words(const std::string& name) {
  std::vector<std::string> words(1);
  for (const char c : lower(name)) {
    if (c != '_' && c != '-') {
      words.back() += c;
    } else if (!words.back().empty()) {
      words.emplace_back();
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

// How far apart two names are when a whole word left out counts as one edit ("--per_device_batch_size" is 1 from
// both --per_device_train_batch_size and --per_device_eval_batch_size) and a changed word counts its letters' edits:
// the shorter name's words are matched in order to words of the longer one, every unmatched word costing 1. The
// smaller of that and the letters' edit distance.
std::size_t name_distance(const std::string& a, const std::string& b) {
  auto shorter = name_words(a);
  auto longer = name_words(b);
  if (shorter.size() > longer.size()) std::swap(shorter, longer);
  constexpr std::size_t none = static_cast<std::size_t>(-1) / 2;
  // cost[i][j]: the first i words of `shorter` matched within the first j of `longer`.
  std::vector<std::vector<std::size_t>> cost(shorter.size() + 1, std::vector<std::size_t>(longer.size() + 1, none));
  for (std::size_t j = 0; j <= longer.size(); ++j) cost[0][j] = j;
  for (std::size_t i = 1; i <= shorter.size(); ++i) {
    for (std::size_t j = i; j <= longer.size(); ++j) {
      cost[i][j] = std::min(cost[i][j - 1] + 1, cost[i - 1][j - 1] + edit_distance(shorter[i - 1], longer[j - 1]));
    }
  }
  return std::min(cost[shorter.size()][longer.size()], edit_distance(lower(a), lower(b)));
}

// Names Hugging Face users type for the TrainingArguments / run_summarization.py ones, from other trainers' flags
// and habit. Suggested only where the command has the full name.
const std::pair<const char*, const char*> abbreviations[] = {
    {"lr", "learning_rate"},
    {"learningrate", "learning_rate"},
    {"bs", "per_device_train_batch_size"},
    {"batch_size", "per_device_train_batch_size"},
    {"batch", "per_device_train_batch_size"},
    {"train_batch_size", "per_device_train_batch_size"},
    {"micro_batch_size", "per_device_train_batch_size"},
    {"per_device_batch_size", "per_device_train_batch_size"},
    // Commands without a training batch (eval, summarize) have the evaluation one.
    {"bs", "per_device_eval_batch_size"},
    {"batch_size", "per_device_eval_batch_size"},
    {"batch", "per_device_eval_batch_size"},
    {"per_device_batch_size", "per_device_eval_batch_size"},
    {"eval_batch_size", "per_device_eval_batch_size"},
    {"eval_bs", "per_device_eval_batch_size"},
    {"epochs", "num_train_epochs"},
    {"num_epochs", "num_train_epochs"},
    {"n_epochs", "num_train_epochs"},
    {"max_epochs", "num_train_epochs"},
    {"train_epochs", "num_train_epochs"},
    {"steps", "max_steps"},
    {"num_steps", "max_steps"},
    {"train_steps", "max_steps"},
    {"num_train_steps", "max_steps"},
    {"grad_accum", "gradient_accumulation_steps"},
    {"grad_accum_steps", "gradient_accumulation_steps"},
    {"gradient_accumulation", "gradient_accumulation_steps"},
    {"accumulation_steps", "gradient_accumulation_steps"},
    {"accumulate_grad_batches", "gradient_accumulation_steps"},
    {"ga", "gradient_accumulation_steps"},
    {"wd", "weight_decay"},
    {"warmup", "warmup_steps"},
    {"num_warmup_steps", "warmup_steps"},
    {"clip_grad_norm", "max_grad_norm"},
    {"grad_clip", "max_grad_norm"},
    {"gradient_clipping", "max_grad_norm"},
    {"max_norm", "max_grad_norm"},
    {"scheduler", "lr_scheduler_type"},
    {"lr_scheduler", "lr_scheduler_type"},
    {"optimizer", "optim"},
    {"label_smoothing", "label_smoothing_factor"},
    {"max_len", "max_length"},  // eval and summarize: generate()'s max_length
    {"max_len", "max_source_length"},
    {"max_seq_length", "max_source_length"},
    {"max_input_length", "max_source_length"},
    {"max_source_len", "max_source_length"},
    {"max_target_len", "max_target_length"},
    {"max_output_length", "max_target_length"},
    {"max_summary_length", "max_target_length"},
    {"model", "model_name_or_path"},
    {"model_path", "model_name_or_path"},
    {"model_name", "model_name_or_path"},
    {"model_dir", "model_name_or_path"},
    {"output", "output_dir"},
    {"out_dir", "output_dir"},
    {"output_path", "output_dir"},
    {"train_data", "train_file"},
    {"train_path", "train_file"},
    {"eval_file", "validation_file"},
    {"val_file", "validation_file"},
    {"valid_file", "validation_file"},
    {"dev_file", "validation_file"},
    {"validation_data", "validation_file"},
    {"beams", "num_beams"},
    {"beam_size", "num_beams"},
    {"eval_every", "eval_steps"},
    {"save_every", "save_steps"},
    {"log_every", "logging_steps"},
    {"log_steps", "logging_steps"},
    {"evaluation_steps", "eval_steps"},
    {"threads", "num_threads"},
    {"memory", "max_memory"},
    {"memory_budget", "max_memory"},
};

// The full name a known abbreviation of `word` stands for among `candidates` (the first entry the candidates have),
// or "".
std::string abbreviated_name(const std::string& word, const std::vector<std::string>& candidates) {
  std::string key = lower(word);
  key.erase(0, key.find_first_not_of('-'));
  std::replace(key.begin(), key.end(), '-', '_');
  for (const auto& [abbreviation, full] : abbreviations) {
    if (key != abbreviation) continue;
    const std::string flag = std::string("--") + full;
    for (const auto& candidate : candidates) {
      if (candidate == flag || candidate == full) return candidate;
    }
  }
  return "";
}

const CLI::App* find_subcommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == name) return sub;
  }
  return nullptr;
}

// A flag: an option that takes no value (CLI11's add_flag).
bool is_flag(const CLI::Option* option) { return option != nullptr && option->get_expected_max() == 0; }

// A flag that takes a list of values (--report_to, --unfused).
bool is_list(const CLI::Option* option) {
  return option != nullptr && !is_flag(option) && option->get_items_expected_max() > 1;
}

// The elements of a JSON list of strings and numbers, as words; nullopt for any other text. An empty list is one
// empty word, the empty value (as --report_to none).
std::optional<std::vector<std::string>> json_list_words(const std::string& text) {
  const auto start = text.find_first_not_of(" \t\n");
  if (start == std::string::npos || text[start] != '[') return std::nullopt;
  const auto list = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!list.is_array()) return std::nullopt;
  std::vector<std::string> words;
  for (const auto& element : list) {
    if (element.is_string()) {
      words.push_back(element.get<std::string>());
    } else if (element.is_number()) {
      words.push_back(element.dump());
    } else {
      return std::nullopt;
    }
  }
  if (words.empty()) words.emplace_back();
  return words;
}

std::vector<std::string> subcommand_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::App* sub : command.get_subcommands([](const CLI::App*) { return true; })) {
    if (!sub->get_name().empty()) names.push_back(sub->get_name());
  }
  return names;
}

// A command made of subcommands (`fitsum bench train|matmul`) followed by a word that names none of them.
void check_nested_command(const CLI::App& command, const std::vector<std::string>& args, std::size_t next) {
  const auto names = subcommand_names(command);
  if (names.empty() || command.get_require_subcommand_min() == 0) return;
  std::string list;
  for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
  if (next >= args.size() || args[next].rfind("-", 0) == 0) {
    if (next < args.size() && (args[next] == "--help" || args[next] == "-h")) return;
    throw UsageError("fitsum " + command.get_name() + " needs one of: " + list);
  }
  const auto suggestion = nearest_name(args[next], names);
  throw UsageError("unknown command '" + command.get_name() + " " + args[next] + "'; fitsum " + command.get_name() +
                   " runs one of: " + list + (suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?"));
}

std::string unknown_flag_message(const CLI::App& command, const std::string& name) {
  std::string message = "unknown flag " + name + " for fitsum " + command.get_name();
  const auto suggestion = suggested_flag(command, name);
  if (!suggestion.empty()) return message + "; did you mean " + suggestion + "?";
  return message + "; see fitsum " + command.get_name() + " --help";
}

// `name` as the command knows it: dashed words become underscored ones (--learning-rate); throws UsageError with
// a suggestion for an unknown flag.
std::string known_name(const CLI::App& command, const std::string& name) {
  if (command.get_option_no_throw(name) != nullptr || name == "--help") return name;
  std::string underscored = name;
  std::replace(underscored.begin() + 2, underscored.end(), '-', '_');
  if (command.get_option_no_throw(underscored) == nullptr) throw UsageError(unknown_flag_message(command, name));
  return underscored;
}

// Rewrites `value` of an option of CLI11 type `type` (INT, UINT or FLOAT) into the text CLI11 converts back to the
// number Python's int() / float() read; returns the error message for a value they refuse ("" otherwise). CLI11 on its own reads integers with
// strtoll's base detection (010 is 8, 0x10 is 16) and floats with strtold (0x1p-3 is 0.125).
std::string python_number_text(std::string& value, const std::string& type) {
  try {
    if (type.rfind("FLOAT", 0) == 0) {
      value = util::exact_decimal(util::parse_python_float(value));
      return "";
    }
    const auto number = util::parse_python_int(value);
    if (number < 0 && type.rfind("UINT", 0) == 0) return "'" + value + "' is negative; it takes 0 or more";
    value = std::to_string(number);
    return "";
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

}  // namespace

bool parse_boolean_word(const std::string& word, const std::string& flag) {
  const auto w = lower(word);
  if (w == "true" || w == "1" || w == "yes") return true;
  if (w == "false" || w == "0" || w == "no") return false;
  throw UsageError(flag + " takes true or false (also True/False, 1/0, yes/no), not '" + word + "'");
}

void read_numbers_as_python(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    const bool number = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0 || type.rfind("FLOAT", 0) == 0;
    if (!number || is_flag(option)) continue;
    // A transform runs before the option's checks (CLI::Range) and its conversion, so both see the decimal value.
    option->transform(CLI::Validator([type](std::string& value) { return python_number_text(value, type); }, ""));
  }
  for (CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) read_numbers_as_python(*sub);
}

std::vector<std::string> long_option_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options()) {
    for (const auto& name : option->get_lnames()) names.push_back("--" + name);
  }
  for (const CLI::App* group : command.get_subcommands([](const CLI::App* s) { return s->get_name().empty(); })) {
    const auto more = long_option_names(*group);
    names.insert(names.end(), more.begin(), more.end());
  }
  return names;
}

std::string suggested_flag(const CLI::App& command, const std::string& name) {
  // `fitsum plan` takes train's flags; in both, a name as close to a training flag as to an evaluation one most
  // likely meant the training one.
  const std::string preferred = command.get_name() == "plan" ? "train" : command.get_name();
  return nearest_name(name, long_option_names(command), preferred);
}

std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates,
                         const std::string& preferred_word) {
  if (auto full = abbreviated_name(word, candidates); !full.empty()) return full;
  std::string best;
  // The closest by name_distance; among equally close ones, a name holding `preferred_word`, then the fewest
  // letter edits.
  std::tuple<std::size_t, bool, std::size_t> best_rank{std::max<std::size_t>(2, word.size() / 4) + 1, false, 0};
  for (const auto& candidate : candidates) {
    const auto words = name_words(candidate);
    const bool preferred = std::find(words.begin(), words.end(), preferred_word) != words.end();
    const std::tuple<std::size_t, bool, std::size_t> rank{name_distance(word, candidate), !preferred,
                                                          edit_distance(lower(word), lower(candidate))};
    if (rank < best_rank) {
      best = candidate;
      best_rank = rank;
    }
  }
  return best;
}

std::vector<std::string> normalize_arguments(const CLI::App& app, const std::vector<std::string>& args) {
  if (args.empty() || args[0].rfind("-", 0) == 0) return args;
  const CLI::App* command = find_subcommand(app, args[0]);
  if (command == nullptr) {
    const auto suggestion = nearest_name(args[0], subcommand_names(app));
    throw UsageError("unknown command '" + args[0] + "'" +
                     (suggestion.empty() ? "; see fitsum --help" : "; did you mean '" + suggestion + "'?"));
  }
  std::vector<std::string> out{args[0]};
  std::size_t first = 1;
  // Nested subcommands (`fitsum bench train ...`): the flags belong to the innermost one named.
  while (first < args.size() && find_subcommand(*command, args[first]) != nullptr) {
    command = find_subcommand(*command, args[first]);
    out.push_back(args[first++]);
  }
  check_nested_command(*command, args, first);
  for (std::size_t i = first; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {  // the rest is positional
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      out.push_back(arg);
      continue;
    }
    const auto equals = arg.find('=');
    const std::string name = known_name(*command, arg.substr(0, equals));
    const std::string rest = equals == std::string::npos ? "" : arg.substr(equals);
    const CLI::Option* option = command->get_option_no_throw(name);
    const bool joins_word = rest.empty() && i + 1 < args.size() && is_boolean_word(args[i + 1]);
    if (joins_word && is_flag(option)) {
      out.push_back(name + "=" + (parse_boolean_word(args[++i], name) ? "true" : "false"));
      continue;
    }
    // A list given as JSON (--report_to '["tensorboard"]', as an args file gives it): one word per element.
    const bool next_is_value = rest.empty() && i + 1 < args.size();
    const auto elements = is_list(option)
                              ? json_list_words(rest.empty() ? (next_is_value ? args[i + 1] : "") : rest.substr(1))
                              : std::nullopt;
    if (elements) {
      out.push_back(name);
      out.insert(out.end(), elements->begin(), elements->end());
      if (rest.empty()) ++i;
    } else {
      out.push_back(name + rest);
    }
  }
  return out;
}

}  // namespace fitsum::cli
