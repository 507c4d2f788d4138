// The training settings, under Hugging Face's TrainingArguments / Seq2SeqTrainingArguments names and defaults, so
// a user's existing arguments mean the same here. Parsed once (from flags and a JSON file, see tools/fitsum) into
// this typed struct, validated in one place, printed resolved at start-up.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "fitsum/train/lr_schedule.h"

namespace fitsum::train {

enum class IntervalStrategy { no, steps, epoch };
IntervalStrategy interval_strategy_from_string(const std::string& name, const char* flag);
const char* to_string(IntervalStrategy strategy);

struct TrainingArguments {
  std::string output_dir;
  bool overwrite_output_dir = false;
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
  std::string lr_scheduler_type = "linear";
  std::int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;
  std::string optim = "adamw_torch";  // adamw_torch, adamw_hf (alias), adafactor
  double label_smoothing_factor = 0.0;
  bool gradient_checkpointing = false;
  std::optional<std::int64_t> gradient_checkpointing_layers;  // the first N layers of each stack
  bool bf16 = false;
  bool fp16 = false;
  double logging_steps = 500;  // >= 1: every that many steps; < 1: that fraction of the total steps
  std::string eval_strategy = "no";
  std::optional<double> eval_steps;  // defaults to logging_steps
  std::string save_strategy = "steps";
  double save_steps = 500;  // accepts 1e6
  std::optional<std::int64_t> save_total_limit;
  std::int64_t seed = 42;
  std::string resume_from_checkpoint;  // a checkpoint folder, or "latest"
  bool group_by_length = false;
  // Seq2SeqTrainingArguments: generate at evaluation and report ROUGE next to eval_loss.
  bool predict_with_generate = false;
  std::optional<std::int64_t> generation_num_beams;
  std::optional<std::int64_t> generation_max_length;

  // Throws std::invalid_argument naming the flag, e.g. "--gradient_accumulation_steps must be at least 1".
  void validate() const;

  LrSchedulerType scheduler() const { return lr_scheduler_type_from_string(lr_scheduler_type); }
  IntervalStrategy evaluation() const { return interval_strategy_from_string(eval_strategy, "--eval_strategy"); }
  IntervalStrategy saving() const { return interval_strategy_from_string(save_strategy, "--save_strategy"); }
  // HF's rule for fractional intervals: a value < 1 is a ratio of max_steps, rounded up.
  static std::int64_t interval_in_steps(double value, std::int64_t max_steps);

  nlohmann::ordered_json to_json() const;
};

}  // namespace fitsum::train
