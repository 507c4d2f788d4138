// `fitsum train`: fine-tune a model with Hugging Face's TrainingArguments names (flags and/or a JSON file). The
// library prepares the run (train/training_job.h: model, data, memory plan) and trains it (train/trainer.h); this
// file prints the resolved configuration, a live progress line on a terminal (plain log lines otherwise), and maps
// SIGINT / SIGTERM to a checkpoint of the last completed step and exit 130 / 143.
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "fitsum/train/distributed.h"
#include "fitsum/train/local_launch.h"
#include "fitsum/train/trainer.h"
#include "fitsum/train/training_launch.h"
#include "memory_report.h"
#include "planning.h"
#include "progress.h"
#include "runtime_flags.h"
#include "train_console.h"
#include "train_flags.h"

namespace fitsum::cli {

namespace {

// --nproc_per_node N without a launcher: this process starts the N workers and waits for them.
void launch_workers(int processes) {
  std::printf("starting %d processes on this machine (torchrun's variables, 127.0.0.1)\n", processes);
  std::fflush(stdout);
  train::LocalLaunchOptions launch;
  launch.processes = processes;
  launch.stop_signal = train::requested_stop_signal;
  int status = 0;
  {
    StopSignals signals;
    status =
        train::launch_local_processes(std::filesystem::read_symlink("/proc/self/exe").string(), command_line(), launch);
  }
  if (status != 0) throw ExitStatus{status};
}

void run_train(const TrainCommandOptions& o, const CLI::App& command) {
  // A closed stdout (fitsum train ... | head) fails the log writes with EPIPE instead of killing the run.
  std::signal(SIGPIPE, SIG_IGN);
  require_training_output_files(o);
  const auto launch = train::launch_environment();
  if (train::starts_local_processes(o.nproc_per_node, launch)) return launch_workers(o.nproc_per_node);
  const auto runtime = start_runtime(train::runtime_options_for(o.runtime, launch));
  // With several processes rank 0 reports; the others print what is theirs alone (log_report) and their errors. The
  // rank is known from the launcher before the process group is.
  const bool main_process = launch.rank == 0;
  if (main_process) std::printf("data\n");
  train::PreparedTraining prepared;
  try {
    prepared = train::prepare_training(training_job(command, o), runtime, log_report(launch.rank, !o.disable_tqdm));
  } catch (const memory::PlanDoesNotFit& e) {
    if (e.result().calibration)  // on any process: its own budget is what failed
      std::printf("%s", plan_table(e.result()).c_str());
    throw;
  }
  if (prepared.fit && main_process) print_memory_plan(*prepared.fit);
  const auto& group = prepared.inputs.process_group;
  if (main_process) print_configuration(prepared, runtime);
  auto measured = std::make_shared<std::vector<MeasuredPeak>>();
  const auto args = prepared.args;
  const auto callbacks = main_process ? console_callbacks(measured, !o.disable_tqdm) : train::TrainerCallbacks{};
  const auto world_size = group ? group->size() : 1;
  train::Trainer trainer(args, std::move(prepared.inputs), callbacks);
  if (main_process) print_training_start(trainer, args, world_size);
  std::fflush(stdout);
  train::TrainResult result;
  {
    StopSignals signals;
    result = trainer.train();
  }
  clear_progress_line();  // a run stopped or ended early leaves its bar drawn
  if (result.interrupted) {
    std::printf("fitsum: stopped by signal %d at step %lld; resume with --resume_from_checkpoint latest\n",
                result.stop_signal, static_cast<long long>(result.global_step));
    std::fflush(stdout);
    throw ExitStatus{128 + result.stop_signal};
  }
  if (!main_process) return;
  if (prepared.fit && !o.memory_report.empty()) {
    write_memory_report(o.memory_report, prepared.fit->plan, prepared.fit->layers, prepared.budget, *measured);
    std::printf("fitsum: wrote %s\n", o.memory_report.c_str());
  }
  print_done(result, args);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto options = std::make_shared<TrainCommandOptions>();
  auto* cmd = app.add_subcommand("train",
                                 "Fine-tune a model (Hugging Face TrainingArguments names; an args.json may come "
                                 "first, flags override it)");
  add_training_flags(*cmd, *options);
  cmd->add_option("--nproc_per_node", options->nproc_per_node,
                  "start N data-parallel processes on this machine (as torchrun --nproc_per_node N would)")
      ->check(CLI::Range(1, 1024));
  cmd->callback([options, cmd]() { run_train(*options, *cmd); });
}

}  // namespace fitsum::cli
