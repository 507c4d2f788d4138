// fitsum: fine-tune encoder-decoder summarizers in the memory you have.
// One thin front end over the library: subcommands register themselves (commands.h), errors from the library
// arrive as exceptions and leave with a message and a non-zero status.
#include <algorithm>
#include <iostream>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "argument_text.h"
#include "commands.h"
#include "fitsum/memory/fit.h"
#include "train_flags.h"

int main(int argc, char** argv) {
  CLI::App app{
      "fitsum: fine-tune PEGASUS-style summarizers so that training fits the memory you have.\n"
      "Reads and writes Hugging Face checkpoint folders and speaks TrainingArguments names."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("fitsum 0.1.0"));
  fitsum::cli::add_info_command(app);
  fitsum::cli::add_plan_command(app);
  fitsum::cli::add_rouge_command(app);
  fitsum::cli::add_tokenize_command(app);
  fitsum::cli::add_train_command(app);
  fitsum::cli::add_eval_command(app);
  fitsum::cli::add_summarize_command(app);
  fitsum::cli::add_bench_command(app);
  try {
    // `fitsum train args.json --flag ...`: the JSON file's entries come first, so flags override them.
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() >= 2) {
      const auto named = app.get_subcommands([&](const CLI::App* c) { return c->get_name() == args[0]; });
      if (!named.empty()) {
        auto rest = fitsum::cli::expand_json_arguments(*named.front(), {args.begin() + 1, args.end()});
        args.erase(args.begin() + 1, args.end());
        args.insert(args.end(), rest.begin(), rest.end());
      }
    }
    args = fitsum::cli::normalize_arguments(app, args);
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last-first
    app.parse(args);
  } catch (const fitsum::cli::ExitStatus& status) {
    return status.code;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    const auto* command = app.get_subcommands().empty() ? &app : app.get_subcommands().front();
    std::cerr << "fitsum: error: " << e.what() << "; see fitsum " << command->get_name()
              << (command == &app ? "" : " ") << "--help\n";
    return 2;
  } catch (const fitsum::memory::PlanDoesNotFit& e) {
    std::cerr << "fitsum: error: " << e.what() << "\n";
    return 3;
  } catch (const std::invalid_argument& e) {
    std::cerr << "fitsum: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "fitsum: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
