// The training loop of fitsum, with the semantics of Hugging Face's Trainer where users rely on them (argument
// names, schedules, logging, trainer_state.json, checkpoint folders) and exact where HF was not:
//
//  - Gradient accumulation is exact: an optimizer step's loss is the sum of the per-token losses of all its
//    micro-batches divided by the label tokens of the whole accumulated batch, so micro-batch 4 x 1, 2 x 2 and
//    1 x 4 give the same update. The logged `loss` is that step loss (averaged over the steps since the last log).
//  - The example order is transformers' (data/sampler.h): it depends on the seeds, the epoch and the batch size the
//    user asked for, never on the micro-batches run, so re-splitting a step never changes which examples it sees.
//  - Checkpoints (output_dir/checkpoint-N) hold the model, name-keyed optimizer state, RNG state, data position
//    and trainer_state.json, written to a temporary folder and renamed into place: a crash never leaves one that
//    looks complete but is not. Resuming continues exactly (same data order, same random numbers, same result).
//  - An out-of-memory error inside a micro-batch is survived: in its forward, that micro-batch is split in two and
//    accumulation carries on; in its backward (gradients partly accumulated), the step is redone from its random
//    state with the split micro-batches (under ZeRO stage 2, whose gradients are summed over the processes during
//    each backward, only that micro-batch is redone), by its process alone (train/gradient_reducer.h). The loss
//    denominator is the step's label tokens, so the update covers exactly the same examples. Two steps in a row that
//    needed splits re-plan the run: full checkpointing first, then half the micro-batch with twice the accumulation
//    (same effective batch). Only a single example that does not fit with full checkpointing ends the run, with the
//    out-of-memory advice.
//  - A stop request (SIGINT / SIGTERM / SIGHUP through request_stop) ends the current micro-batch, or an evaluation
//    before its next batch, saves a checkpoint of the last completed step and returns; the interrupted step is redone
//    on resume.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "fitsum/data/collator.h"
#include "fitsum/data/dataset.h"
#include "fitsum/data/sampler.h"
#include "fitsum/generate/options.h"
#include "fitsum/io/checkpoint_folders.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/train/evaluation.h"
#include "fitsum/train/step_statistics.h"
#include "fitsum/train/training_arguments.h"

namespace fitsum::tokenizer {
class Tokenizer;
}
namespace fitsum::io {
class TensorBoardWriter;
class OutputFolderLock;
}

namespace fitsum::train {

namespace fs = std::filesystem;
class ProcessGroup;
class GradientReducer;
class OptimizerOffload;

// Everything the trainer needs besides the arguments; model code and data come in ready, the trainer owns the loop.
struct TrainerInputs {
  model::Seq2SeqLM model{nullptr};
  nlohmann::json config_json;  // written with every saved model
  fs::path tokenizer_dir;      // its tokenizer files are copied into every saved model folder
  std::vector<data::Example> train_examples;
  std::vector<data::Example> eval_examples;
  std::vector<data::Example> test_examples;  // do_predict's test_file
  // What the model card in output_dir names: the model fine-tuned and the data files.
  std::string model_name_or_path;
  fs::path model_dir;  // the folder it resolved to (a Hub id's cache snapshot): its generation_config.json is saved
  std::string train_file;
  std::string validation_file;
  std::string test_file;
  data::CollatorOptions collator;
  torch::Device device = torch::kCPU;
  // For --predict_with_generate: the model folder's decoding defaults and the tokenizer that decodes for ROUGE.
  generate::GenerationOptions generation;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  // The memory planner's prediction for this run (memory/planner.h), logged next to the measured peak.
  std::optional<std::int64_t> predicted_peak_bytes;
  int update_threads = 0;  // LibTorch intra-op threads for the optimizer step (util/threads.h); 0: as they are
  // Data-parallel training (train/distributed.h): this process's group, or none for one process. Every process of
  // the group runs a Trainer with the same arguments and data; rank 0 writes every file, evaluations are sharded.
  std::shared_ptr<ProcessGroup> process_group;
  // output_dir's lock (io/output_folder_lock.h), held for the whole run by the process that writes there (rank 0).
  // prepare_training takes it before anything is written; when it is not given, rank 0 takes it as the run begins.
  std::shared_ptr<io::OutputFolderLock> output_dir_lock;
};

// What the caller sees while training runs (the CLI prints; tests record).
struct TrainerCallbacks {
  std::function<void(const nlohmann::ordered_json& entry)> on_log;  // each log_history entry
  // Once at the start with the step the run starts from (0, or a resumed step), then after each optimizer step.
  std::function<void(std::int64_t step, std::int64_t max_steps)> on_step;
  std::function<void(const std::string& message)> on_message;  // checkpoints saved, resumes, ...
  std::function<void(const std::string& message)> on_warning;  // what the user should act on; else on_message
  // After each micro-batch's backward: micro-batches done and planned in the step being built.
  std::function<void(std::size_t done, std::size_t total)> on_micro_batch;
  // During an evaluation: see EvaluationOptions::on_progress.
  std::function<void(const char* phase, std::size_t done, std::size_t total)> on_evaluation;
};

struct TrainResult {
  std::int64_t global_step = 0;
  std::int64_t start_step = 0;  // where this run started: the resumed checkpoint's step, else 0
  bool interrupted = false;  // stopped by request_stop(); a checkpoint of global_step was saved
  int stop_signal = 0;
  nlohmann::ordered_json metrics;          // the last log_history entry (train_runtime, train_loss, ...)
  bool stopped_early = false;              // early_stopping_patience evaluations without improvement ended the run
  nlohmann::ordered_json eval_metrics;     // do_eval: eval_results.json
  nlohmann::ordered_json predict_metrics;  // do_predict: predict_results.json
};

// Asks a running trainer to stop after the current micro-batch (async-signal-safe: one atomic store).
void request_stop(int signal_number);
// The signal of the stop request, 0 when there was none.
int requested_stop_signal();

// The decoding options of evaluation and prediction: the model folder's defaults with generation_num_beams and
// generation_max_length applied (Seq2SeqTrainer's gen_kwargs).
generate::GenerationOptions evaluation_generation(const TrainingArguments& args,
                                                  const generate::GenerationOptions& model_defaults);

class Trainer {
 public:
  Trainer(TrainingArguments args, TrainerInputs inputs, TrainerCallbacks callbacks = {});
  ~Trainer();

  TrainResult train();
  // The evaluation metrics over the eval examples: eval_loss as HF's evaluation_loop averages it (the mean over batches
  // of each batch's mean token loss) and, with predict_with_generate, ROUGE ×100 and gen_len.
  nlohmann::ordered_json evaluate();

  std::int64_t max_steps() const { return max_steps_; }
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }

  // The checkpoint folder `resume_from_checkpoint` names ("latest": the newest complete one in output_dir).
  static fs::path resolve_checkpoint(const std::string& resume_from_checkpoint, const fs::path& output_dir);

 private:
  // The loss and gradient norm stay on the device (0-dim float64) until a log, evaluation, save or the end reads
  // them (StepStatistics): a step asks the host for nothing.
  struct StepOutcome {
    torch::Tensor loss;
    torch::Tensor grad_norm;
    std::int64_t tokens = 0;
    std::int64_t input_elements = 0;  // of the padded input_ids of every micro-batch (HF's estimate_tokens)
    bool interrupted = false;
  };
  // What this process's micro-batches of a step add up to, before the sum over the processes.
  struct Accumulated {
    StepOutcome outcome;
    torch::Tensor loss_sum;  // () float64 on the device
    std::int64_t samples = 0;
  };
  StepOutcome run_step(const std::vector<std::vector<std::size_t>>& micro_batches);
  // The forward of one micro-batch: its summed token loss (the backward scales it by loss_scale), its input
  // tokens and the elements of its padded input_ids, counted on the host before the batch is copied to the device
  // (train/device_batch.h). Throws c10::OutOfMemoryError with nothing touched.
  kernels::TokenLoss micro_batch_forward(const std::vector<std::size_t>& examples, double loss_scale,
                                         std::int64_t& input_tokens, std::int64_t& input_elements);
  // The micro-batches of one process into its gradients (.grad), summed over the processes during the backward of
  // the last one; an out-of-memory error in a backward redoes the whole step with the split micro-batches.
  Accumulated accumulate(const std::vector<std::vector<std::size_t>>& step, double denominator);
  // Clips (with the norm over every process), updates, shares the updated parameters. Returns the norm (a 0-dim
  // tensor on the device).
  torch::Tensor update_parameters();
  // Reads the step statistics from the device into loss_since_log_, total_loss_ and last_grad_norm_ when a step
  // was taken since the last read; stops the run when a step's loss or gradient norm was not finite.
  void read_step_statistics();
  // Splits micro_batches[index] in two after an out-of-memory error in `phase` (the message then says `then`); a
  // single example cannot be split, so that turns on full checkpointing instead, or rethrows when it is already on.
  void split_after_oom(std::vector<std::vector<std::size_t>>& micro_batches, std::size_t index, const char* phase,
                       const char* then, const c10::OutOfMemoryError& error);
  // After repeated out-of-memory steps: more checkpointing, else a smaller micro-batch. False when neither is left.
  bool replan_after_repeated_oom();
  bool fully_checkpointed() const;
  void save_checkpoint(const torch::Tensor& rng_state);
  void write_checkpoint_files(const fs::path& temp_dir, const torch::Tensor& rng_state);
  void resume(const fs::path& checkpoint);
  void log(nlohmann::ordered_json entry);
  // The loop, top-down: begin_run, then run_epoch until max_steps (each step: run_step, record_step, after_step),
  // then finish_run.
  void begin_run();
  bool run_epoch(const std::vector<std::size_t>& lengths);
  void record_step(const StepOutcome& outcome);
  void after_step(bool end_of_epoch, double epoch_value);
  bool due(IntervalStrategy strategy, std::int64_t every, bool end_of_epoch) const;
  // One evaluation during training, logged and judged for the best model and early stopping; false when a stop
  // request interrupted it.
  bool evaluate_and_record(double epoch_value);
  void log_training(double epoch_value);
  TrainResult finish_run();
  nlohmann::ordered_json trainer_state_json() const;
  // output_dir/trainer_state.json, replaced atomically (at every log, evaluation and save).
  void write_trainer_state() const;
  // After an evaluation at global_step_: the best metric, best_model_checkpoint and early stopping, as HF's
  // _determine_best_metric and EarlyStoppingCallback.on_evaluate do it.
  void record_evaluation(const nlohmann::ordered_json& metrics);
  void prune_checkpoints();
  void load_best_model();
  void save_final_model();
  // What the run reads (the model's and the tokenizer's folders, the data files): never deleted by
  // overwrite_output_dir or save_total_limit, even when they lie in a checkpoint of output_dir.
  std::vector<io::RunInput> run_inputs() const;
  void warn(const std::string& message) const;
  // run_summarization.py's end of a run: train/eval/predict/all_results.json, generated_predictions.txt, README.md.
  void write_run_results(TrainResult& result);
  // Loss and, with predict_with_generate, generation and ROUGE over `examples` (the evaluation options of the run).
  EvaluationResult run_evaluation(const std::vector<data::Example>& examples);

  // Data parallelism (trainer_distributed.cpp). An optimizer step covers per_device_train_batch_size x
  // gradient_accumulation_steps x world size examples, the ones a single process with world-size times the
  // accumulation would see; each process takes its contiguous share of them and splits it into its own
  // micro-batches. The loss denominator is the whole step's label tokens, so one sum of the gradients over the
  // processes gives the single process's gradient.
  void join_process_group();
  std::int64_t examples_per_step() const;
  // HF's data order for this run (data/sampler.h): the user's batch per process (data_batch_size), the accumulation
  // that makes examples_per_step() with it, the processes, the seeds and drop_last.
  data::SamplerOptions sampler_options() const;
  std::vector<std::vector<std::size_t>> own_micro_batches(const std::vector<std::vector<std::size_t>>& step) const;
  // Process `rank`'s share of a step in micro-batches of `micro_batch` examples.
  std::vector<std::vector<std::size_t>> micro_batches_of(const std::vector<std::vector<std::size_t>>& step, int rank,
                                                         std::int64_t micro_batch) const;
  // ZeRO stage 2 (train/gradient_reducer.h): the gradients are summed over the processes during each micro-batch's
  // backward, so every process runs as many micro-batches as the process with the most (the missing ones as zeros)
  // and learns of a stop request after each; an out-of-memory error in a backward redoes that micro-batch only.
  Accumulated accumulate_sharded(const std::vector<std::vector<std::size_t>>& step, double denominator);
  bool gradients_sharded() const;  // several processes under ZeRO stage 2
  void train_sharded_micro_batch(const std::vector<std::size_t>& examples, double denominator, Accumulated& into);
  // Sums loss, samples, tokens and the stop flag over the processes (the gradients were summed during the
  // backward); one process: nothing to do.
  void reduce_step(StepOutcome& outcome, torch::Tensor& loss_sum, std::int64_t& samples);
  // A stop request seen by any process (every process must call it at the same point).
  bool stop_requested();
  // Every process evaluates its share of the batches and ends with the whole result (EvaluationOptions::shards).
  void shard_evaluation(EvaluationOptions& options);
  // After an evaluation: whether rank 0's early stopping ends the run, on every process (whether the sharded
  // evaluation completed every process knows already).
  void share_early_stopping();
  // Rank 0's weights and buffers on every process.
  void share_rank_zero_weights();
  // ZeRO stage 1 (optim/sharding.h): the parameters whose optimizer state this process keeps and updates (none:
  // every parameter), and after each update, every parameter from its owner to the others.
  std::optional<std::set<std::string>> owned_parameter_names() const;
  void share_updated_parameters();
  // Zeroes every gradient (with a sharded optimizer, also those it does not update).
  void zero_gradients();
  // Where this process's optimizer state goes in a checkpoint (io/checkpoint_folders.h).
  std::string optimizer_file_name() const;
  void write_optimizer_state(const fs::path& dir) const;
  void read_optimizer_state(const fs::path& checkpoint);
  // Every process writes its optimizer shard into rank 0's temporary folder; rank 0 commits it once all have.
  void save_sharded_checkpoint(const torch::Tensor& rng_state);

  TrainingArguments args_;
  TrainerInputs in_;
  TrainerCallbacks callbacks_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<std::pair<std::string, torch::Tensor>> parameters_;
  std::vector<torch::Tensor> parameter_list_;
  LrSchedule schedule_;

  data::SamplerOptions sampler_;
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t max_steps_ = 0;
  std::int64_t num_epochs_ = 0;
  std::int64_t logging_steps_ = 0;
  std::int64_t eval_steps_ = 0;
  std::int64_t save_steps_ = 0;

  // Progress, all of it saved in checkpoints.
  std::int64_t global_step_ = 0;
  std::int64_t epoch_ = 0;          // the epoch being run
  std::int64_t step_in_epoch_ = 0;  // the next optimizer step within it
  double loss_since_log_ = 0.0;     // summed step losses since the last log
  std::int64_t steps_since_log_ = 0;
  double total_loss_ = 0.0;  // summed step losses of the whole run
  double last_grad_norm_ = 0.0;
  StepStatistics statistics_;  // the three above, on the device, read when needed
  bool head_bias_nonzero_ = true;  // kernels::KnownLabels::bias_nonzero, read once as the trainer is built
  // HF's total_flos: 6 x non-embedding parameters x padded input elements, summed over every micro-batch of every
  // process (trainer_state.json keeps it across resumes).
  double total_flos_ = 0.0;
  std::int64_t non_embedding_parameters_ = 0;
  std::int64_t saved_step_ = -1;  // the step of the last checkpoint this run saved
  // The best model (trainer_state.json's best_metric / best_model_checkpoint) and early stopping's count.
  std::optional<double> best_metric_;
  std::string best_model_checkpoint_;
  std::optional<std::int64_t> best_global_step_;
  std::int64_t evaluations_without_improvement_ = 0;
  bool stop_early_ = false;
  std::unique_ptr<io::TensorBoardWriter> tensorboard_;  // report_to tensorboard
  nlohmann::ordered_json log_history_ = nlohmann::ordered_json::array();

  // Measurements of this process (not saved).
  using Clock = std::chrono::steady_clock;
  Clock::time_point log_start_;
  std::int64_t tokens_since_log_ = 0;
  double seconds_since_log_ = 0.0;
  double train_seconds_ = 0.0;
  std::int64_t start_step_ = 0;  // the step this run started from (a resumed checkpoint's)
  std::int64_t train_tokens_ = 0;
  std::int64_t train_samples_ = 0;
  std::int64_t oom_splits_since_log_ = 0;
  std::int64_t oom_splits_in_step_ = 0;
  std::int64_t oom_steps_in_a_row_ = 0;

  std::shared_ptr<ProcessGroup> group_;  // none: one process
  int world_size_ = 1;
  bool main_process_ = true;      // rank 0 (HF's is_world_process_zero)
  std::vector<int> owner_;        // ZeRO stage 1: the rank that updates each of parameter_list_ (empty: stage 0)
  // Multi-process: sums the gradients over the processes (stages 0 and 1: one buffer whose slices are .grad).
  std::unique_ptr<GradientReducer> reducer_;
  std::int64_t round_micro_batch_ = 0;  // ZeRO stage 2: the micro-batch every process agreed on (one sum each)
  // --offload_optimizer cpu: the host copies optimizer_ updates (train/optimizer_offload.h); none otherwise.
  std::unique_ptr<OptimizerOffload> offload_;
  // What optimizer_ updates, by name: the host copies under offload, else parameters_.
  const std::vector<std::pair<std::string, torch::Tensor>>& optimizer_parameters() const;
};

}  // namespace fitsum::train
