// `fitsum plan`: the flags of `fitsum train` plus --max_memory (default auto) and --format; predicts every
// candidate configuration's peak memory and speed from a short calibration probe of the model and prints the
// table and the chosen plan (docs/memory.md). With --format json, stdout holds only the JSON; logs go to stderr.
#include <iostream>

#include "commands.h"
#include "fitsum/util/runtime.h"
#include "hub_flags.h"
#include "memory_report.h"
#include "planning.h"
#include "runtime_flags.h"
#include "train_flags.h"

namespace fitsum::cli {

namespace {

struct PlanCommandOptions {
  TrainCommandOptions train;
  std::string format = "table";
  int world_size = 0;  // 0: the launcher's environment, else 1
};

void run_plan(PlanCommandOptions& p, const CLI::App& command) {
  if (p.format != "table" && p.format != "json") {
    throw std::invalid_argument("--format '" + p.format + "' is not one of table, json");
  }
  require_training_output_files(p.train);
  // Planning needs no GPU: --device cuda where none is visible plans for one, with the probe on this CPU.
  const bool for_cuda = p.train.runtime.device == "cuda" && !util::cuda_visible();
  if (for_cuda) {
    p.train.runtime.device = "cpu";
    std::cerr << "fitsum: device cuda: no CUDA device here; planning for one (an H100 / H200) with the probe on this "
                 "machine's CPU\n";
  }
  const auto runtime = start_runtime(p.train.runtime);
  const train::Report report{[](const std::string& line) { std::cerr << "fitsum: " << line << "\n"; },
                             [](const std::string& line) { std::cerr << "fitsum: warning: " << line << "\n"; },
                             nullptr, download_progress()};
  auto job = training_job(command, p.train);
  job.world_size = p.world_size;
  job.plan_for_cuda = for_cuda;
  const auto fit = train::plan_training(std::move(job), runtime, report);
  if (fit.calibration) {
    std::cerr << "fitsum: calibration probe: " << fit.calibration->samples.size() << " passes in "
              << static_cast<int>(fit.calibration->probe_seconds * 1000) << " ms\n";
  }
  if (p.format == "json") {
    std::cout << plan_json(fit, fit.budget).dump(2) << "\n";
  } else {
    if (fit.calibration) std::cout << plan_table(fit);
    if (fit.explanation != fit.plan.explanation) std::cout << fit.explanation << "\n";
    if (fit.chosen) std::cout << "flags: " << memory::plan_arguments(fit.chosen->knobs, *fit.calibration) << "\n";
  }
  std::cout.flush();
  if (!p.train.memory_report.empty() && fit.calibration) {
    write_memory_report(p.train.memory_report, fit.plan, fit.layers, fit.budget, {});
    std::cerr << "fitsum: wrote " << p.train.memory_report << "\n";
  }
  if (fit.status != memory::FitStatus::fits) throw ExitStatus{3};
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanCommandOptions>();
  auto* cmd = app.add_subcommand("plan",
                                 "Predict peak memory and speed of training configurations and choose the fastest "
                                 "that fits --max_memory (same flags as train)");
  add_training_flags(*cmd, options->train);
  cmd->add_option("--format", options->format, "table or json (stdout holds only the JSON)")->capture_default_str();
  cmd->add_option("--world_size", options->world_size,
                  "plan each process of a data-parallel run of N processes (default: the launcher's, else 1)")
      ->check(CLI::Range(1, 65536));
  cmd->callback([options, cmd]() { run_plan(*options, *cmd); });
}

}  // namespace fitsum::cli
