// The fitsum subcommands. Each one lives in its own file (info.cpp, tokenize.cpp, ...), declares its typed options
// on the CLI11 app here and runs library code in its callback. Library code throws; main() catches and reports.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace fitsum::cli {

// Thrown by a command that must end with a particular exit status (e.g. 130 after SIGINT, once its checkpoint is
// safely written); main() returns the code.
struct ExitStatus {
  int code;
};

// The arguments fitsum was started with (argv, the program's name first), as main() received them: what
// `fitsum train --nproc_per_node N` starts each of its processes with.
void set_command_line(int argc, char** argv);
const std::vector<std::string>& command_line();

void add_info_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_rouge_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_summarize_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_bench_allocator_command(CLI::App& bench);  // bench_allocator.cpp: `fitsum bench allocator`
void add_download_command(CLI::App& app);
void add_merge_command(CLI::App& app);

}  // namespace fitsum::cli
