// Implements train_console.h.
#include "train_console.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "fitsum/kernels/onednn_linear.h"
#include "fitsum/util/host_allocator.h"
#include "fitsum/util/threads.h"
#include "hub_flags.h"
#include "planning.h"
#include "progress.h"

namespace fitsum::cli {

namespace {

std::atomic<int> g_stop_signals{0};

// The first SIGINT / SIGTERM / SIGHUP asks the trainer to save and stop after the current micro-batch; a second one
// (Ctrl-C again) exits at once: checkpoints are only ever renamed into place, so none is left partial.
void on_stop_signal(int signal_number) {
  if (g_stop_signals.fetch_add(1) > 0) ::_exit(128 + signal_number);
  static const char message[] =
      "\nfitsum: stopping: saving a checkpoint after the current micro-batch (send the signal again to exit at once)\n";
  (void)!::write(STDERR_FILENO, message, sizeof(message) - 1);
  train::request_stop(signal_number);
}

// What the progress line shows besides the counts: the latest logged loss, the step being built.
struct TrainingProgress {
  explicit TrainingProgress(bool enabled) : line(enabled), evaluation(enabled) { line.start("train", 0); }
  ProgressLine line;
  ProgressLine evaluation;
  std::int64_t step = 0;
  std::int64_t max_steps = 0;
  std::string loss;

  void show_step(bool force) { line.show(step, loss, force); }
  void show_micro_batch(std::size_t done, std::size_t total) {
    const std::string micro = "micro-batch " + std::to_string(done) + "/" + std::to_string(total);
    line.show(step, loss.empty() ? micro : loss + ", " + micro, step == 0 && done == 1);
  }
};

std::string loss_text(const nlohmann::ordered_json& entry) {
  if (!entry.contains("loss") || !entry["loss"].is_number()) return {};
  char text[32];
  std::snprintf(text, sizeof text, "loss=%.4f", entry["loss"].get<double>());
  return text;
}

}  // namespace

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

void print_memory_plan(const memory::FitResult& fit) {
  std::printf("memory plan (worst batch %lld source x %lld target tokens, probe %.1f s)\n%s",
              static_cast<long long>(fit.worst.source), static_cast<long long>(fit.worst.target),
              fit.calibration->probe_seconds, plan_table(fit).c_str());
  std::printf("memory plan: %s\n  flags: %s\n", fit.explanation.c_str(),
              memory::plan_arguments(fit.chosen->knobs, *fit.calibration).c_str());
}

void print_training_start(const train::Trainer& trainer, const train::TrainingArguments& args, int world_size) {
  std::printf("training: %lld optimizer steps (%lld per epoch), %lld examples per step = %lld x %lld accumulation",
              static_cast<long long>(trainer.max_steps()), static_cast<long long>(trainer.steps_per_epoch()),
              static_cast<long long>(args.per_device_train_batch_size * args.gradient_accumulation_steps * world_size),
              static_cast<long long>(args.per_device_train_batch_size),
              static_cast<long long>(args.gradient_accumulation_steps));
  if (world_size > 1) std::printf(" x %d processes", world_size);
  std::printf("\n");
}

void print_done(const train::TrainResult& result, const train::TrainingArguments& args) {
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

// Log entries and messages as lines on stdout; progress on stderr, erased on a terminal before each line.
train::TrainerCallbacks console_callbacks(std::shared_ptr<std::vector<MeasuredPeak>> measured, bool progress) {
  auto state = std::make_shared<TrainingProgress>(progress);
  train::TrainerCallbacks callbacks;
  callbacks.on_log = [state, measured](const nlohmann::ordered_json& entry) {
    if (entry.contains("peak_memory_bytes") && entry.contains("step")) {
      measured->push_back({entry["step"].get<std::int64_t>(), entry["peak_memory_bytes"].get<std::uint64_t>()});
    }
    state->line.clear();
    state->evaluation.clear();
    std::printf("%s\n", entry.dump().c_str());
    std::fflush(stdout);
    if (const auto loss = loss_text(entry); !loss.empty()) state->loss = loss;
    if (!entry.contains("train_runtime")) state->show_step(true);  // the run's summary is its last line
  };
  callbacks.on_message = [state](const std::string& message) {
    state->line.clear();
    state->evaluation.clear();
    std::printf("fitsum: %s\n", message.c_str());
    std::fflush(stdout);
  };
  callbacks.on_warning = [state](const std::string& message) {
    state->line.clear();
    state->evaluation.clear();
    std::fflush(stdout);
    std::fprintf(stderr, "fitsum: warning: %s\n", message.c_str());
  };
  callbacks.on_step = [state](std::int64_t step, std::int64_t max_steps) {
    state->max_steps = max_steps;
    state->line.set_total(max_steps);
    state->step = step;
    state->show_step(false);
    if (step == max_steps) state->line.clear();  // the summary and "done" follow
  };
  callbacks.on_micro_batch = [state](std::size_t done, std::size_t total) { state->show_micro_batch(done, total); };
  callbacks.on_evaluation = [state](const char* phase, std::size_t done, std::size_t total) {
    if (done == 1) state->evaluation.start(std::string("eval (") + phase + ")", static_cast<std::int64_t>(total));
    state->evaluation.show(static_cast<std::int64_t>(done), "", done == 1);
  };
  return callbacks;
}

StopSignals::StopSignals() {
  g_stop_signals.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
  sigaction(SIGHUP, &action, &previous_hup_);  // the terminal or ssh session closed: save, exit 129
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGHUP, &previous_hup_, nullptr);
}

}  // namespace fitsum::cli
