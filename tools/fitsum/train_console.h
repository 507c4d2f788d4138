// What `fitsum train` shows while it runs and how it stops: log entries and messages as lines on stdout, progress
// on stderr (training steps, the micro-batches of a step under accumulation, evaluation batches; see progress.h),
// and SIGINT / SIGTERM / SIGHUP turned into a stop request (the trainer saves a checkpoint of the last completed
// step).
#pragma once

#include <memory>
#include <vector>

#include <signal.h>

#include "fitsum/train/trainer.h"
#include "memory_report.h"

namespace fitsum::cli {

// Every log entry with a measured peak is also appended to `measured` (for --memory_report). `progress` false
// (disable_tqdm) leaves stderr quiet.
train::TrainerCallbacks console_callbacks(std::shared_ptr<std::vector<MeasuredPeak>> measured, bool progress);

// While it lives, SIGINT, SIGTERM and SIGHUP ask the trainer to stop after the current micro-batch (a second one
// exits at once); the previous handlers come back when it goes.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
  struct sigaction previous_hup_ {};
};

}  // namespace fitsum::cli
