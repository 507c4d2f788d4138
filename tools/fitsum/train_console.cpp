// Implements train_console.h.
#include "train_console.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

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

}  // namespace

// Log entries and messages as lines; on a terminal, a progress bar redrawn in place between them.
train::TrainerCallbacks console_callbacks(std::shared_ptr<std::vector<MeasuredPeak>> measured) {
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  train::TrainerCallbacks callbacks;
  callbacks.on_log = [tty, measured](const nlohmann::ordered_json& entry) {
    if (entry.contains("peak_memory_bytes") && entry.contains("step")) {
      measured->push_back({entry["step"].get<std::int64_t>(), entry["peak_memory_bytes"].get<std::uint64_t>()});
    }
    std::printf("%s%s\n", tty ? "\r\033[K" : "", entry.dump().c_str());
    std::fflush(stdout);
  };
  callbacks.on_message = [tty](const std::string& message) {
    std::printf("%sfitsum: %s\n", tty ? "\r\033[K" : "", message.c_str());
    std::fflush(stdout);
  };
  callbacks.on_step = [tty, start](std::int64_t step, std::int64_t max_steps) {
    if (!tty) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta = step > 0 ? elapsed / static_cast<double>(step) * static_cast<double>(max_steps - step) : 0.0;
    const int width = 30;
    const int filled = static_cast<int>(width * step / std::max<std::int64_t>(1, max_steps));
    std::printf("\r\033[K[%s%s] %lld/%lld steps, %.0f s elapsed, ETA %.0f s", std::string(filled, '#').c_str(),
                std::string(width - filled, ' ').c_str(), static_cast<long long>(step),
                static_cast<long long>(max_steps), elapsed, eta);
    std::fflush(stdout);
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
