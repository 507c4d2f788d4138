// `fitsum train` and `fitsum plan` as library calls, minus the printing: the typed request the command line parses
// into (TrainingJob), and the steps from it to a trainer that is ready to run: the model loaded, the data read, the
// memory plan made and applied. Every policy of those steps lives here (which records are dropped, what an output
// folder that already holds a run means, when a budget is planned for and which knobs the planner may change); the
// front end only formats what comes back.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fitsum/data/dataset.h"
#include "fitsum/io/hub_download.h"
#include "fitsum/io/model_loader.h"
#include "fitsum/memory/fit.h"
#include "fitsum/train/trainer.h"
#include "fitsum/train/training_arguments.h"
#include "fitsum/util/runtime.h"

namespace fitsum::train {

// Which of the planner's knobs the user set explicitly; the others it may choose under a budget.
struct FixedKnobs {
  bool micro_batch = false;    // per_device_train_batch_size and gradient_accumulation_steps stay as given
  bool optimizer = false;      // optim (unless it is "auto")
  bool checkpointing = false;  // gradient_checkpointing (and gradient_checkpointing_layers)
  bool zero_stage = false;     // zero_stage
};

struct TrainingJob {
  io::ModelSource model;
  data::DataOptions data;
  TrainingArguments args;
  std::string train_file;
  std::string validation_file;
  std::string test_file;             // do_predict's data
  bool keep_empty_examples = false;  // run_summarization.py drops records with an empty text or summary
  std::string max_memory;            // a size ("6GiB"), "auto" (free memory), or empty: no budget
  FixedKnobs fixed;
  // The processes the plan is for: `fitsum plan --world_size N`; 0: the launcher's (train/distributed.h), else 1.
  int world_size = 0;
  // `fitsum plan --device cuda` on a machine without CUDA: the plan is for a CUDA device (an H100 / H200), with the
  // probe on this machine's CPU (memory::FitRequest::for_cuda_device). plan_training only.
  bool plan_for_cuda = false;
};

// Where progress lines ("train_file data/train.jsonl: 14732 examples, ...") and warnings go, one line per call.
// `process` takes the lines about this process alone, which every process of a job has its own of (its place in the
// job, the memory plan it took from rank 0), where the others are the same on every process; without it they go to
// `info`.
struct Report {
  std::function<void(const std::string& line)> info;
  std::function<void(const std::string& line)> warning;
  std::function<void(const std::string& line)> process;
  io::HubProgressFn download;  // a model named by Hub id being downloaded into the cache (io/hub.h)
};

struct PreparedTraining {
  TrainingArguments args;  // with the memory plan applied
  TrainerInputs inputs;
  std::string model_description;
  std::string tokenizer_description;
  std::uint64_t budget = 0;              // 0: no budget
  std::optional<memory::FitResult> fit;  // with a budget: the plan that was applied
};

// The longest source and target the examples can produce after truncation (rounded up to pad_to_multiple_of), or
// max_source_length / max_target_length when there are none. Its batch is 1.
memory::BatchShape worst_batch_shape(const std::vector<data::Example>& examples, const data::DataOptions& data);

// The planner request for `args`: the effective batch is kept; the knobs in `fixed` stay as given.
// With several processes (`world_size`), each gets the same plan; the ZeRO stage is the planner's unless fixed.
memory::FitRequest make_fit_request(const TrainingArguments& args, const FixedKnobs& fixed,
                                    const memory::BatchShape& worst, std::uint64_t budget, int world_size = 1);
// The planner's offload knob from `args` (train/optimizer_offload.cpp): offload_optimizer (auto: the planner's
// choice) and max_host_memory.
void add_offload_request(const TrainingArguments& args, memory::FitRequest& request);

// Sets micro-batch, accumulation, checkpointing and optimizer of `args` to the knobs'.
void apply_plan(TrainingArguments& args, const memory::PlanKnobs& knobs, const model::ModelConfig& config);

// What the run's evaluations will hold, for the planner: per_device_eval_batch_size, the longest source and labels
// of the eval and predict data (their worst batch shape), and the decoding options the trainer uses. Nothing when
// the run has no data to evaluate.
std::optional<memory::EvaluationLoad> evaluation_load(const TrainingArguments& args, const TrainerInputs& inputs,
                                                      const data::DataOptions& data);

// Bytes one checkpoint of a model of `config` takes on disk: model.safetensors (every parameter and buffer in
// float32, as saves write them), optimizer.safetensors (the state of `optimizer`; none when checkpoints carry no
// optimizer state), the tokenizer files copied beside them (`tokenizer_bytes`), and 256 KiB for the safetensors
// headers, the step counters and the JSON files. Overflow-checked.
std::uint64_t predicted_checkpoint_bytes(const model::ModelConfig& config,
                                         std::optional<optim::OptimizerType> optimizer, std::uint64_t tokenizer_bytes);

// The warning to give when `free_bytes` in `output_dir` cannot take one checkpoint of `checkpoint_bytes`; nothing
// when they can. A warning, not an error: the prediction is an estimate and other processes free space too.
std::optional<std::string> free_disk_warning(const std::string& output_dir, std::uint64_t free_bytes,
                                             std::uint64_t checkpoint_bytes);

// Everything before the first step; warns (before the model loads) when output_dir's disk cannot take one
// checkpoint. Throws std::invalid_argument for inconsistent arguments, std::runtime_error
// for bad files, memory::PlanDoesNotFit when a budget is given and no plan fits it.
PreparedTraining prepare_training(TrainingJob job, const util::Runtime& runtime, const Report& report);

// `fitsum plan`: the same model and data, the plan alone (nothing is trained or written). Without max_memory the
// budget is the device's free memory.
memory::FitResult plan_training(TrainingJob job, const util::Runtime& runtime, const Report& report);

}  // namespace fitsum::train
