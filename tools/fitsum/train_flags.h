// The flags of `fitsum train` (and of `fitsum plan`, which takes the same), under Hugging Face's names:
// ModelArguments, DataTrainingArguments and Seq2SeqTrainingArguments of run_summarization.py. They are registered
// once here, each with its help and default, in option groups (model, data, training, memory, evaluation,
// logging, runtime), into one typed train::TrainingJob.
//
// A JSON file of the same names can stand first (`fitsum train args.json --learning_rate 1e-4`): its entries are
// read as if given on the command line before the flags, so the flags override it.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "fitsum/train/training_job.h"
#include "fitsum/util/runtime.h"

namespace fitsum::cli {

struct TrainCommandOptions {
  train::TrainingJob job;
  util::RuntimeOptions runtime;
  bool no_resplit = false;    // --no_resplit: the planner keeps the micro-batch and accumulation as given
  std::string memory_report;  // --memory_report: an SVG of the plan (and, after training, the measured peaks)
  bool disable_tqdm = false;  // --disable_tqdm: no progress on stderr
  int nproc_per_node = 1;     // fitsum train --nproc_per_node: start that many processes here (train/local_launch.h)
};

void add_training_flags(CLI::App& command, TrainCommandOptions& options);

// Checks --memory_report before anything loads: writable, and none of the files the run reads.
void require_training_output_files(const TrainCommandOptions& options);

// The job with the knobs the user set on the command line (or in the JSON file) marked as fixed for the planner.
train::TrainingJob training_job(const CLI::App& command, const TrainCommandOptions& options);

// Replaces a leading `*.json` argument of `command` by the flags it holds. `args` are the arguments after the
// subcommand's name. Throws std::invalid_argument naming the file and key for unknown keys or unusable values.
std::vector<std::string> expand_json_arguments(const CLI::App& command, const std::vector<std::string>& args);

}  // namespace fitsum::cli
