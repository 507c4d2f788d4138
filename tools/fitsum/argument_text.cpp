// Implements tools/fitsum/argument_text.h.
#include "argument_text.h"

#include <algorithm>
#include <cctype>

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

const CLI::App* find_subcommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == name) return sub;
  }
  return nullptr;
}

// A flag: an option that takes no value (CLI11's add_flag).
bool is_flag(const CLI::Option* option) { return option != nullptr && option->get_expected_max() == 0; }

std::string unknown_flag_message(const CLI::App& command, const std::string& name) {
  std::string message = "unknown flag " + name + " for fitsum " + command.get_name();
  const auto suggestion = nearest_name(name, long_option_names(command));
  if (!suggestion.empty()) return message + "; did you mean " + suggestion + "?";
  return message + "; see fitsum " + command.get_name() + " --help";
}

}  // namespace

bool parse_boolean_word(const std::string& word, const std::string& flag) {
  const auto w = lower(word);
  if (w == "true" || w == "1" || w == "yes") return true;
  if (w == "false" || w == "0" || w == "no") return false;
  throw UsageError(flag + " takes true or false (also True/False, 1/0, yes/no), not '" + word + "'");
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

std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, word.size() / 4) + 1;
  for (const auto& candidate : candidates) {
    const auto d = edit_distance(lower(word), lower(candidate));
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

std::vector<std::string> normalize_arguments(const CLI::App& app, const std::vector<std::string>& args) {
  if (args.empty() || args[0].rfind("-", 0) == 0) return args;
  const CLI::App* command = find_subcommand(app, args[0]);
  if (command == nullptr) {
    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (!sub->get_name().empty()) commands.push_back(sub->get_name());
    }
    const auto suggestion = nearest_name(args[0], commands);
    throw UsageError("unknown command '" + args[0] + "'" +
                     (suggestion.empty() ? "; see fitsum --help" : "; did you mean '" + suggestion + "'?"));
  }
  std::vector<std::string> out{args[0]};
  for (std::size_t i = 1; i < args.size(); ++i) {
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
    std::string name = arg.substr(0, equals);
    const std::string rest = equals == std::string::npos ? "" : arg.substr(equals);
    if (command->get_option_no_throw(name) == nullptr && name != "--help") {
      std::string underscored = name;
      std::replace(underscored.begin() + 2, underscored.end(), '-', '_');
      if (command->get_option_no_throw(underscored) == nullptr) throw UsageError(unknown_flag_message(*command, name));
      name = underscored;
    }
    const bool joins_word = rest.empty() && i + 1 < args.size() && is_boolean_word(args[i + 1]);
    if (joins_word && is_flag(command->get_option_no_throw(name))) {
      out.push_back(name + "=" + (parse_boolean_word(args[++i], name) ? "true" : "false"));
    } else {
      out.push_back(name + rest);
    }
  }
  return out;
}

}  // namespace fitsum::cli
