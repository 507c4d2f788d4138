// fitsum: fine-tune encoder-decoder summarizers in the memory you have.
// One thin front end over the library: subcommands register themselves (commands.h), errors from the library
// arrive as exceptions and leave as one line and a non-zero status (errors.h).
#include <algorithm>
#include <iostream>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <torch/version.h>

#include "argument_text.h"
#include "commands.h"
#include "errors.h"
#include "fitsum/kernels/onednn_linear.h"
#include "fitsum/util/host_allocator.h"
#include "fitsum/util/threads.h"
#include "standard_streams.h"
#include "train_flags.h"

namespace fitsum::cli {

namespace {
std::vector<std::string>& stored_command_line() {
  static std::vector<std::string> line;
  return line;
}
}  // namespace

void set_command_line(int argc, char** argv) { stored_command_line().assign(argv, argv + argc); }
const std::vector<std::string>& command_line() { return stored_command_line(); }

}  // namespace fitsum::cli

int main(int argc, char** argv) {
  fitsum::cli::prepare_process();
  fitsum::cli::set_command_line(argc, argv);
  CLI::App app{
      "fitsum: fine-tune PEGASUS-style summarizers so that training fits the memory you have.\n"
      "Reads and writes Hugging Face checkpoint folders and speaks TrainingArguments names."};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] {
    return std::string("fitsum 0.1.0\nLibTorch ") + TORCH_VERSION + ", BLAS: " + fitsum::util::blas_description() +
           ", model products: " + (fitsum::kernels::onednn_available() ? "oneDNN" : "LibTorch's") +
           ", host allocator: " + fitsum::util::host_allocator_description();
  });
  fitsum::cli::add_info_command(app);
  fitsum::cli::add_plan_command(app);
  fitsum::cli::add_rouge_command(app);
  fitsum::cli::add_tokenize_command(app);
  fitsum::cli::add_train_command(app);
  fitsum::cli::add_eval_command(app);
  fitsum::cli::add_summarize_command(app);
  fitsum::cli::add_bench_command(app);
  fitsum::cli::add_download_command(app);
  fitsum::cli::add_merge_command(app);
  fitsum::cli::read_numbers_as_python(app);
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
  } catch (...) {
    const int status = fitsum::cli::report_exception(std::current_exception(), app);
    return status != 0 ? status : fitsum::cli::finish_standard_output();  // --help, --version
  }
  return fitsum::cli::finish_standard_output();
}
