// `fitsum train`: fine-tune a model with Hugging Face's TrainingArguments names (flags and/or a JSON file). The
// library prepares the run (train/training_job.h: model, data, memory plan) and trains it (train/trainer.h); this
// file prints the resolved configuration, a live progress line on a terminal (plain log lines otherwise), and maps
// SIGINT / SIGTERM to a checkpoint of the last completed step and exit 130 / 143.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "hub_flags.h"
#include "fitsum/kernels/onednn_linear.h"
#include "fitsum/train/distributed.h"
#include "fitsum/train/local_launch.h"
#include "fitsum/train/trainer.h"
#include "fitsum/util/host_allocator.h"
#include "fitsum/util/threads.h"
#include "memory_report.h"
#include "planning.h"
#include "progress.h"
#include "runtime_flags.h"
#include "train_console.h"
#include "train_flags.h"

namespace fitsum::cli {

namespace {

// The preparation's report. With several processes rank 0 prints it: the others read the same arguments and data
// and would print the same lines and warnings again. They print the lines about themselves alone (their place in the
// job, the plan they took from rank 0) on stderr, as each process of a torchrun job logs its own rank, and errors.
// A model named by Hub id shows its download's progress on rank 0's stderr (`progress`).
train::Report log_report(int rank, bool progress) {
  if (rank != 0) {
    return {[](const std::string&) {}, [](const std::string&) {},
            [rank](const std::string& line) { std::cerr << "fitsum: rank " << rank << ": " << line << "\n"; },
            io::HubProgressFn{}};
  }
  return {[](const std::string& line) { std::printf("  %s\n", line.c_str()); },
          [](const std::string& line) { std::cerr << "fitsum: warning: " << line << "\n"; }, nullptr,
          progress ? download_progress() : io::HubProgressFn{}};
}

void print_configuration(const train::PreparedTraining& p, const util::Runtime& runtime) {
  std::printf("resolved configuration\n");
  std::printf("  %-28s %s\n", "model", p.model_description.c_str());
  std::printf("  %-28s %s\n", "tokenizer", p.tokenizer_description.c_str());
  std::printf("  %-28s %s, %d intra-op threads, %d BLAS threads (%s)\n", "device", runtime.device.str().c_str(),
              runtime.threads.intra_op, util::blas_threads(), util::blas_description().c_str());
  std::printf(
      "  %-28s %s\n", "model products",
      kernels::onednn_available() && runtime.device.is_cpu() ? "oneDNN (FITSUM_ONEDNN=0: LibTorch's)" : "LibTorch's");
  std::printf("  %-28s %s\n", "host allocator", util::host_allocator_description().c_str());
  std::printf("  %-28s %zu train, %zu eval\n", "examples", p.inputs.train_examples.size(),
              p.inputs.eval_examples.size());
  const auto arguments = p.args.to_json();  // kept alive: items() refers into it
  for (const auto& item : arguments.items()) {
    const auto& v = item.value();
    std::printf("  %-28s %s\n", item.key().c_str(), v.is_string() ? v.get<std::string>().c_str() : v.dump().c_str());
  }
  std::fflush(stdout);
}

// --nproc_per_node N without a launcher: this process starts the N workers and waits for them (true). Under a
// launcher (or in one of those workers) the process trains itself (false).
bool launch_workers(const TrainCommandOptions& o) {
  if (o.nproc_per_node <= 1) return false;
  const auto env = train::launch_environment();
  if (env.distributed()) {
    if (env.world_size != o.nproc_per_node) {
      throw std::invalid_argument("--nproc_per_node " + std::to_string(o.nproc_per_node) + " inside a job of " +
                                  std::to_string(env.world_size) + " processes (" + env.launcher +
                                  "): leave --nproc_per_node to runs without a launcher");
    }
    return false;
  }
  std::printf("starting %d processes on this machine (torchrun's variables, 127.0.0.1)\n", o.nproc_per_node);
  std::fflush(stdout);
  train::LocalLaunchOptions launch;
  launch.processes = o.nproc_per_node;
  launch.stop_signal = train::requested_stop_signal;
  int status = 0;
  {
    StopSignals signals;
    status =
        train::launch_local_processes(std::filesystem::read_symlink("/proc/self/exe").string(), command_line(), launch);
  }
  if (status != 0) throw ExitStatus{status};
  return true;
}

void run_train(const TrainCommandOptions& o, const CLI::App& command) {
  // A closed stdout (fitsum train ... | head) fails the log writes with EPIPE instead of killing the run.
  std::signal(SIGPIPE, SIG_IGN);
  require_training_output_files(o);
  if (launch_workers(o)) return;
  auto runtime_options = o.runtime;
  const auto launch = train::launch_environment();
  runtime_options.local_rank = launch.local_rank;             // its device, under a launcher
  runtime_options.local_processes = launch.local_world_size;  // which share the machine's cores
  const auto runtime = start_runtime(runtime_options);
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
  if (prepared.fit && main_process) {
    const auto& fit = *prepared.fit;
    std::printf("memory plan (worst batch %lld source x %lld target tokens, probe %.1f s)\n%s",
                static_cast<long long>(fit.worst.source), static_cast<long long>(fit.worst.target),
                fit.calibration->probe_seconds, plan_table(fit).c_str());
    std::printf("memory plan: %s\n  flags: %s\n", fit.explanation.c_str(),
                memory::plan_arguments(fit.chosen->knobs, *fit.calibration).c_str());
  }
  const auto& group = prepared.inputs.process_group;
  if (main_process) print_configuration(prepared, runtime);
  auto measured = std::make_shared<std::vector<MeasuredPeak>>();
  const auto args = prepared.args;
  const auto callbacks = main_process ? console_callbacks(measured, !o.disable_tqdm) : train::TrainerCallbacks{};
  const auto world_size = group ? group->size() : 1;
  train::Trainer trainer(args, std::move(prepared.inputs), callbacks);
  if (main_process) {
    std::printf(
        "training: %lld optimizer steps (%lld per epoch), %lld examples per step = %lld x %lld accumulation",
        static_cast<long long>(trainer.max_steps()), static_cast<long long>(trainer.steps_per_epoch()),
        static_cast<long long>(args.per_device_train_batch_size * args.gradient_accumulation_steps * world_size),
        static_cast<long long>(args.per_device_train_batch_size),
        static_cast<long long>(args.gradient_accumulation_steps));
    if (world_size > 1) std::printf(" x %d processes", world_size);
    std::printf("\n");
  }
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
  // A resumed run counts the steps it trained itself, and says from where to where.
  const auto trained = result.global_step - result.start_step;
  const std::string span = result.start_step > 0 ? " (from step " + std::to_string(result.start_step) + " to " +
                                                       std::to_string(result.global_step) + ")"
                                                 : "";
  std::printf("done: %lld step%s%s in %.1f s, train_loss %.6f; %s saved to %s\n", static_cast<long long>(trained),
              trained == 1 ? "" : "s", span.c_str(), result.metrics["train_runtime"].get<double>(),
              result.metrics["train_loss"].get<double>(), args.trains_adapters() ? "adapter" : "model",
              args.output_dir.c_str());
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
