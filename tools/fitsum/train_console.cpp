// Implements train_console.h.
#include "train_console.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

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
