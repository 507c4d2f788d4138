// The flags of `fitsum train` (and of the commands that plan or evaluate a training run), under Hugging Face's
// names: ModelArguments, DataTrainingArguments and Seq2SeqTrainingArguments of run_summarization.py. They are
// registered once here, each with its help and default, into one typed struct.
//
// A JSON file of the same names can stand first (`fitsum train args.json --learning_rate 1e-4`): its entries are
// read as if given on the command line before the flags, so the flags override it.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "fitsum/data/dataset.h"
#include "fitsum/io/model_loader.h"
#include "fitsum/train/training_arguments.h"

namespace fitsum::cli {

struct TrainCommandOptions {
  io::ModelSource model;
  data::DataOptions data;
  train::TrainingArguments training;
  std::string train_file;
  std::string validation_file;
  std::string device = "auto";  // cpu, cuda, auto
  int num_threads = 0;          // intra-op threads; 0: fitsum's default (util/threads.h)
  int blas_threads = 0;         // BLAS threads; 0: fitsum's default
  std::string cuda_alloc_conf;  // PYTORCH_CUDA_ALLOC_CONF, set before CUDA initialises
  bool keep_empty_examples = false;
  std::string max_memory;     // --max_memory: a size or "auto"; empty = no budget
  bool no_resplit = false;    // --no_resplit: the planner keeps the micro-batch and accumulation as given
  std::string memory_report;  // --memory_report: an SVG of the plan (and, after training, the measured peaks)
};

void add_training_flags(CLI::App& command, TrainCommandOptions& options);

// Replaces a leading `*.json` argument of `command` by the flags it holds. `args` are the arguments after the
// subcommand's name. Throws std::invalid_argument naming the file and key for unknown keys or unusable values.
std::vector<std::string> expand_json_arguments(const CLI::App& command, const std::vector<std::string>& args);

}  // namespace fitsum::cli
