// The training settings, under Hugging Face's TrainingArguments / Seq2SeqTrainingArguments names and defaults, so
// a user's existing arguments mean the same here. Parsed once (from flags and a JSON file, see tools/fitsum) into
// this typed struct, validated in one place, printed resolved at start-up.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fitsum/model/lora.h"
#include "fitsum/optim/offload.h"
#include "fitsum/optim/optimizers.h"
#include "fitsum/train/lr_schedule.h"

namespace fitsum::train {

// HF's IntervalStrategy (logging_strategy, eval_strategy, save_strategy).
enum class IntervalStrategy { no, steps, epoch };
// "no", "steps", "epoch"; throws std::invalid_argument naming `field`.
IntervalStrategy parse_interval_strategy(const std::string& name, const char* field);
const char* to_string(IntervalStrategy strategy);

// HF's report_to values: "tensorboard" and "all" (every integration fitsum has: TensorBoard) turn the event files
// on; "none" (or nothing) leaves them off; an integration fitsum does not have is refused by name.
bool parse_report_to(const std::vector<std::string>& values);

// HF's `optim` names, and "auto": the memory planner chooses (empty optional).
std::optional<optim::OptimizerType> parse_optim(const std::string& name);
// offload_optimizer: none, cpu, DeepSpeed's {"device": "cpu"}, or "auto" (std::nullopt: the planner chooses).
std::optional<optim::OffloadDevice> parse_offload_optimizer(const std::string& text);

struct TrainingArguments {
  // Bounds of validate(): batch sizes and examples per optimizer step, epochs, interval lengths (in steps).
  static constexpr std::int64_t kMaxBatchSize = std::int64_t{1} << 24;
  static constexpr double kMaxEpochs = 1e6;
  static constexpr double kMaxIntervalSteps = 1e15;  // also bounds max_steps and warmup_steps
  static constexpr std::int64_t kMaxSeed = 4294967295;
  static constexpr std::int64_t kMaxDdpTimeout = 2147483647;

  std::string output_dir;
  bool overwrite_output_dir = false;
  // run_summarization.py's steps after training: evaluate on the validation set, predict on the test set, each
  // writing its <split>_results.json (and generated_predictions.txt) into output_dir.
  bool do_eval = false;
  bool do_predict = false;
  double num_train_epochs = 3.0;
  std::int64_t max_steps = -1;  // > 0 overrides num_train_epochs
  std::int64_t per_device_train_batch_size = 8;
  std::int64_t per_device_eval_batch_size = 8;
  std::int64_t gradient_accumulation_steps = 1;
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;  // 0 disables clipping
  LrSchedulerType lr_scheduler_type = LrSchedulerType::linear;
  std::int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;
  // adamw_torch (HF's default) or adafactor; empty is "auto": the memory planner chooses (under a memory budget).
  std::optional<optim::OptimizerType> optim = optim::OptimizerType::adamw_torch;
  double label_smoothing_factor = 0.0;
  bool gradient_checkpointing = false;
  std::optional<std::int64_t> gradient_checkpointing_layers;  // the first N layers of each stack
  // The first N layers of the encoder / decoder; each overrides gradient_checkpointing_layers for its stack.
  std::optional<std::int64_t> gradient_checkpointing_encoder_layers;
  std::optional<std::int64_t> gradient_checkpointing_decoder_layers;
  // HF's legacy seq2seq --freeze_embeds: the shared token embedding (and through the tie the LM head) is not
  // trained; no gradient, no optimizer state for it.
  bool freeze_embeds = false;
  bool bf16 = false;
  bool fp16 = false;
  // Low-rank adapters (model/lora.h) under PEFT's LoraConfig names: r 0 is full fine-tuning. With adapters the base
  // is frozen (no gradient, no optimizer state) and only the adapters (and what lora.bias and
  // lora.modules_to_save name) train. adapter_name_or_path: a PEFT adapter folder to continue training from.
  model::LoraConfig lora;
  std::string adapter_name_or_path;
  // "float32" or "bfloat16": the frozen base's Linear weights held in bfloat16 (LoRA only; full fine-tuning trains
  // the base, which stays float32).
  std::string base_dtype = "float32";
  IntervalStrategy logging_strategy = IntervalStrategy::steps;
  double logging_steps = 500;       // >= 1: every that many steps; < 1: that fraction of the total steps
  bool logging_first_step = false;  // also log after the first optimizer step
  IntervalStrategy eval_strategy = IntervalStrategy::no;
  std::optional<double> eval_steps;  // defaults to logging_steps
  IntervalStrategy save_strategy = IntervalStrategy::steps;
  double save_steps = 500;  // accepts 1e6
  std::optional<std::int64_t> save_total_limit;
  std::int64_t seed = 42;
  std::optional<std::int64_t> data_seed;  // the data order's seed; defaults to seed (HF's data_seed)
  std::string resume_from_checkpoint;     // a checkpoint folder, or "latest"
  bool group_by_length = false;
  bool dataloader_drop_last = false;  // HF's: each process's last incomplete batch of an epoch is not trained on
  bool dataloader_pin_memory = true;  // HF's: on CUDA, batches are pinned and copied asynchronously
  // The per-process batch HF's DataLoader cuts the epoch order into: the user's per_device_train_batch_size, kept
  // here by apply_plan when the memory planner runs it as smaller micro-batches, so that every optimizer step holds
  // the examples transformers' Trainer would give it (data/sampler.h). Empty: per_device_train_batch_size.
  std::optional<std::int64_t> data_batch_size;
  // Seq2SeqTrainingArguments: generate at evaluation and report ROUGE next to eval_loss.
  bool predict_with_generate = false;
  std::optional<std::int64_t> generation_num_beams;
  std::optional<std::int64_t> generation_max_length;
  // rougeLsum over sentences split one per line (as `fitsum eval --rouge_split_sentences` and run_summarization's
  // nltk step do), so eval_rougeLsum can differ from eval_rougeL.
  bool rouge_split_sentences = false;

  // The best model (HF's load_best_model_at_end / metric_for_best_model / greater_is_better): tracked whenever a
  // metric is named (load_best_model_at_end names "loss"); the checkpoint holding it is never pruned, and with
  // load_best_model_at_end it is the model saved at the end.
  bool load_best_model_at_end = false;
  std::optional<std::string> metric_for_best_model;  // "loss", "rouge1", ... ("eval_" is prefixed as HF does)
  std::optional<bool> greater_is_better;             // default: false for a metric ending in "loss", else true
  // HF's EarlyStoppingCallback: stop after this many evaluations in a row that did not improve the best metric by
  // more than early_stopping_threshold. Needs load_best_model_at_end.
  std::optional<std::int64_t> early_stopping_patience;
  double early_stopping_threshold = 0.0;

  // Data parallelism across processes (train/distributed.h; the launcher's environment says how many): HF's
  // ddp_backend (empty: nccl on CUDA devices where the build has it, else gloo) and ddp_timeout, the seconds a
  // collective waits for the other processes.
  std::string ddp_backend;
  std::int64_t ddp_timeout = 1800;
  // ZeRO stage (optim/sharding.h): 0 every process keeps the whole optimizer state; 1 each keeps and updates its share
  // of the parameters' state (the same weights, 1/N of the state per process); 2 each also keeps only the gradients of
  // its share. The gradients are summed over the processes (train/gradient_reducer.h) in buckets of
  // ddp_bucket_cap_mb MiB (HF's name; DDP's default 25) during the backward that finishes them: of each step's last
  // micro-batch (stages 0 and 1), of every micro-batch (stage 2). No effect with one process.
  int zero_stage = 0;
  double ddp_bucket_cap_mb = 25.0;
  std::int64_t ddp_bucket_bytes() const;

  // The optimizer's state and update on the host (train/optimizer_offload.h): DeepSpeed's offload_optimizer.device.
  // Unset is "auto": the memory planner (max_memory) chooses, offloading only where that is the fastest plan that
  // fits (without a plan: none). Not combined with a ZeRO stage that shards the optimizer (validate refuses it).
  // max_host_memory caps the host bytes it needs (0: the machine's available memory, MemAvailable).
  std::optional<optim::OffloadDevice> offload_optimizer = optim::OffloadDevice::none;
  std::uint64_t max_host_memory = 0;
  bool offloads_optimizer() const { return offload_optimizer == optim::OffloadDevice::cpu; }

  // Where the run is reported besides stdout and trainer_state.json: "tensorboard" (event files under logging_dir)
  // or none. logging_dir defaults to HF's output_dir/runs/<Mon DD_HH-MM-SS>_<hostname>.
  bool report_to_tensorboard = false;
  std::string logging_dir;

  // Throws std::invalid_argument naming the field, e.g. "gradient_accumulation_steps must be at least 1": every
  // number in its range (no NaN, no infinity where a finite number is meant), before anything is loaded.
  void validate() const;
  void validate_best_model() const;
  // The LoRA fields alone (part of validate()): PEFT's ranges, no LoRA setting without lora_r or an adapter, and
  // base_dtype bfloat16 only with adapters.
  void validate_lora() const;
  // Whether the run trains adapters (lora_r > 0, or an adapter to continue from) rather than the whole model.
  bool trains_adapters() const { return lora.enabled() || !adapter_name_or_path.empty(); }

  // The optimizer to build; throws std::logic_error while optim is still "auto" (the planner resolves it first).
  optim::OptimizerType optimizer() const;
  // Checkpointed encoder and decoder layers (the bottom ones): (0, 0) without gradient_checkpointing; a count at or
  // beyond a stack's depth means all of it.
  std::pair<std::int64_t, std::int64_t> checkpointed_layers() const;
  // Sets the checkpointed layers per stack; (0, 0) turns gradient_checkpointing off.
  void set_checkpointed_layers(std::int64_t encoder_layers, std::int64_t decoder_layers);
  // HF's rule for fractional intervals: a value < 1 is a ratio of max_steps, rounded up.
  static std::int64_t interval_in_steps(double value, std::int64_t max_steps);

  // The evaluation metric the best model is chosen by ("eval_loss", "eval_rouge1", ...); empty when none is named.
  std::string best_metric_key() const;
  // greater_is_better as HF resolves it.
  bool best_metric_greater_is_better() const;

  nlohmann::ordered_json to_json() const;
};

}  // namespace fitsum::train
