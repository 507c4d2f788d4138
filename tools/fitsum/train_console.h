// What `fitsum train` shows while it runs and how it stops: log entries and messages as lines on stdout, progress
// on stderr (training steps, the micro-batches of a step under accumulation, evaluation batches; see progress.h),
// and SIGINT / SIGTERM / SIGHUP turned into a stop request (the trainer saves a checkpoint of the last completed
// step).
#pragma once

#include <memory>
#include <vector>

#include <signal.h>

#include "fitsum/memory/fit.h"
#include "fitsum/train/trainer.h"
#include "fitsum/train/training_job.h"
#include "fitsum/util/runtime.h"
#include "memory_report.h"

namespace fitsum::cli {

// The preparation's report for the process of rank `rank`: with several processes rank 0 prints it, the others only
// the lines about themselves (on stderr). `progress`: a model named by Hub id shows its download's progress.
train::Report log_report(int rank, bool progress);

// The lines before the first step: the memory plan (with a budget), the resolved configuration, the steps to run.
void print_memory_plan(const memory::FitResult& fit);
void print_configuration(const train::PreparedTraining& p, const util::Runtime& runtime);
void print_training_start(const train::Trainer& trainer, const train::TrainingArguments& args, int world_size);

// The run's last line: the steps this run trained (a resumed run says from which step to which), its time and loss,
// and where the model (or adapter) went.
void print_done(const train::TrainResult& result, const train::TrainingArguments& args);

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
