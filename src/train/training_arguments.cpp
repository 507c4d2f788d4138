// Implements include/fitsum/train/training_arguments.h.
#include "fitsum/train/training_arguments.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "fitsum/train/evaluation.h"

namespace fitsum::train {

IntervalStrategy parse_interval_strategy(const std::string& name, const char* field) {
  if (name == "no") return IntervalStrategy::no;
  if (name == "steps") return IntervalStrategy::steps;
  if (name == "epoch") return IntervalStrategy::epoch;
  throw std::invalid_argument(std::string(field) + " '" + name + "' is not one of no, steps, epoch");
}

bool parse_report_to(const std::vector<std::string>& values) {
  bool tensorboard = false;
  for (const auto& value : values) {
    if (value == "tensorboard" || value == "all") {
      tensorboard = true;
    } else if (value != "none" && !value.empty()) {
      throw std::invalid_argument("report_to " + value +
                                  " is not supported by fitsum: it reports to tensorboard (event files under "
                                  "logging_dir) and always to output_dir/trainer_state.json; report_to takes "
                                  "tensorboard, all or none, as words or as a JSON list of them");
    }
  }
  return tensorboard;
}

std::optional<optim::OptimizerType> parse_optim(const std::string& name) {
  if (name == "auto") return std::nullopt;
  return optim::parse_optimizer_type(name, "optim");
}

std::optional<optim::OffloadDevice> parse_offload_optimizer(const std::string& text) {
  if (text == "auto") return std::nullopt;
  try {
    return optim::parse_offload_device(text);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("offload_optimizer '" + text +
                                "' is not one of none, cpu (the optimizer's state and update in host memory) or "
                                "auto (the memory planner's choice, under --max_memory)");
  }
}

std::pair<std::int64_t, std::int64_t> TrainingArguments::checkpointed_layers() const {
  if (!gradient_checkpointing) return {0, 0};
  const auto both = gradient_checkpointing_layers.value_or(std::numeric_limits<std::int64_t>::max());
  return {gradient_checkpointing_encoder_layers.value_or(both), gradient_checkpointing_decoder_layers.value_or(both)};
}

void TrainingArguments::set_checkpointed_layers(std::int64_t encoder_layers, std::int64_t decoder_layers) {
  gradient_checkpointing = encoder_layers > 0 || decoder_layers > 0;
  gradient_checkpointing_layers.reset();
  gradient_checkpointing_encoder_layers.reset();
  gradient_checkpointing_decoder_layers.reset();
  if (gradient_checkpointing && encoder_layers != std::numeric_limits<std::int64_t>::max()) {
    gradient_checkpointing_encoder_layers = encoder_layers;
  }
  if (gradient_checkpointing && decoder_layers != std::numeric_limits<std::int64_t>::max()) {
    gradient_checkpointing_decoder_layers = decoder_layers;
  }
}

optim::OptimizerType TrainingArguments::optimizer() const {
  if (!optim) throw std::logic_error("optim is 'auto': the memory planner must choose the optimizer first");
  return *optim;
}

const char* to_string(IntervalStrategy strategy) {
  switch (strategy) {
    case IntervalStrategy::no:
      return "no";
    case IntervalStrategy::steps:
      return "steps";
    case IntervalStrategy::epoch:
      return "epoch";
  }
  return "?";
}

std::string TrainingArguments::best_metric_key() const {
  // HF's __post_init__: load_best_model_at_end without a metric means "loss"; evaluate() prefixes "eval_".
  std::string metric = metric_for_best_model.value_or(load_best_model_at_end ? "loss" : "");
  if (metric.empty() || metric.rfind("eval_", 0) == 0) return metric;
  return "eval_" + metric;
}

bool TrainingArguments::best_metric_greater_is_better() const {
  if (greater_is_better) return *greater_is_better;
  const auto key = best_metric_key();
  return !(key.size() >= 4 && key.compare(key.size() - 4, 4, "loss") == 0);
}

// HF's rules for load_best_model_at_end and EarlyStoppingCallback, checked before anything runs.
void TrainingArguments::validate_best_model() const {
  if (load_best_model_at_end) {
    if (eval_strategy == IntervalStrategy::no) {
      throw std::invalid_argument("load_best_model_at_end needs evaluations: set eval_strategy steps or epoch");
    }
    if (eval_strategy != save_strategy) {
      throw std::invalid_argument(std::string("load_best_model_at_end requires the save and eval strategy to match, "
                                              "but eval_strategy is ") +
                                  to_string(eval_strategy) + " and save_strategy " + to_string(save_strategy));
    }
    const double every = eval_steps.value_or(logging_steps);
    if (eval_strategy == IntervalStrategy::steps && every >= 1 && save_steps >= 1 &&
        std::fmod(save_steps, every) != 0.0) {
      std::ostringstream text;
      text << "load_best_model_at_end requires save_steps to be a round multiple of eval_steps, but found "
           << save_steps << " and " << every;
      throw std::invalid_argument(text.str());
    }
  }
  const auto key = best_metric_key();
  // HF looks the name up in the first evaluation's metrics and fails there, after the steps before it: checked now.
  const auto reported = evaluation_metric_keys(/*labelled=*/true, /*generated=*/true, /*decoded=*/true);
  if (!key.empty() && std::find(reported.begin(), reported.end(), key) == reported.end()) {
    std::string names;
    for (const auto& name : reported) names += (names.empty() ? "" : ", ") + name.substr(5);
    throw std::invalid_argument("metric_for_best_model '" + *metric_for_best_model +
                                "' is not a metric the evaluation reports; choose one of " + names +
                                " (with or without the eval_ prefix)");
  }
  const bool generated_metric = key.rfind("eval_rouge", 0) == 0 || key == "eval_gen_len";
  if (generated_metric && !predict_with_generate) {
    throw std::invalid_argument("metric_for_best_model " + key +
                                " needs predict_with_generate (ROUGE and gen_len "
                                "come from generated summaries)");
  }
  if (early_stopping_patience) {
    if (*early_stopping_patience < 1) throw std::invalid_argument("early_stopping_patience must be at least 1");
    if (!load_best_model_at_end) {
      throw std::invalid_argument(
          "early_stopping_patience requires load_best_model_at_end (as HF's "
          "EarlyStoppingCallback does) and an eval_strategy");
    }
  }
  if (!(early_stopping_threshold >= 0 && std::isfinite(early_stopping_threshold))) {
    throw std::invalid_argument("early_stopping_threshold must be a finite number, not negative");
  }
}

namespace {

// Seq2SeqTrainer passes them to generate() at every evaluation; a value it refuses would stop the run there.
void validate_generation(const TrainingArguments& args) {
  if (args.generation_num_beams && *args.generation_num_beams < 1) {
    throw std::invalid_argument("generation_num_beams must be at least 1 (1 means greedy search), got " +
                                std::to_string(*args.generation_num_beams));
  }
  if (args.generation_max_length && *args.generation_max_length < 2) {
    throw std::invalid_argument(
        "generation_max_length must be at least 2 (the decoder start token and one generated token), got " +
        std::to_string(*args.generation_max_length));
  }
}

}  // namespace

std::int64_t TrainingArguments::interval_in_steps(double value, std::int64_t max_steps) {
  if (value < 1.0) return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(value * max_steps)));
  return static_cast<std::int64_t>(value);
}

std::int64_t TrainingArguments::ddp_bucket_bytes() const {
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(ddp_bucket_cap_mb * 1048576.0)));
}

namespace {

std::string number_text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// The optimizer's numbers, with torch.optim.AdamW's rules (which HF's Trainer meets only when it builds the
// optimizer, after the model has loaded): betas in [0, 1), epsilon and weight decay not negative. Non-finite values
// are refused too: none of them means anything.
void validate_optimizer_values(const TrainingArguments& a) {
  if (!(a.learning_rate >= 0 && std::isfinite(a.learning_rate))) {
    throw std::invalid_argument("learning_rate must be a finite number, not negative, got " +
                                number_text(a.learning_rate));
  }
  for (const auto& [field, value] : {std::pair{"adam_beta1", a.adam_beta1}, std::pair{"adam_beta2", a.adam_beta2}}) {
    if (!(value >= 0 && value < 1)) {
      throw std::invalid_argument(std::string(field) + " must be in [0, 1), got " + number_text(value) +
                                  " (as torch.optim.AdamW requires)");
    }
  }
  if (!(a.adam_epsilon >= 0 && std::isfinite(a.adam_epsilon))) {
    throw std::invalid_argument("adam_epsilon must be a finite number, not negative, got " +
                                number_text(a.adam_epsilon));
  }
  if (!(a.weight_decay >= 0 && std::isfinite(a.weight_decay))) {
    throw std::invalid_argument("weight_decay must be a finite number, not negative, got " +
                                number_text(a.weight_decay));
  }
  // inf is no clipping, as torch.nn.utils.clip_grad_norm_ treats it.
  if (!(a.max_grad_norm >= 0)) {
    throw std::invalid_argument("max_grad_norm must not be negative (0 disables clipping), got " +
                                number_text(a.max_grad_norm));
  }
  if (!(a.warmup_ratio >= 0 && a.warmup_ratio <= 1)) {
    throw std::invalid_argument("warmup_ratio must be in [0, 1], got " + number_text(a.warmup_ratio));
  }
  if (!(a.label_smoothing_factor >= 0 && a.label_smoothing_factor < 1)) {
    throw std::invalid_argument("label_smoothing_factor must be in [0, 1), got " +
                                number_text(a.label_smoothing_factor));
  }
}

// Step counts and intervals. HF reads logging_steps, eval_steps and save_steps as floats: below 1 a fraction of the
// run, above 1 a whole number of steps ("--logging_steps must be an integer if bigger than 1").
void validate_step_values(const TrainingArguments& a) {
  const auto interval = [](double v, const char* field) {
    if (!(v > 0 && v <= TrainingArguments::kMaxIntervalSteps)) {
      throw std::invalid_argument(std::string(field) + " must be positive and at most 1e15, got " + number_text(v));
    }
    if (v > 1 && v != std::floor(v)) {
      throw std::invalid_argument(std::string(field) + " must be a whole number of steps when above 1 (below 1 it " +
                                  "is a fraction of the run, as in HF), got " + number_text(v));
    }
  };
  interval(a.logging_steps, "logging_steps");
  if (a.eval_steps) interval(*a.eval_steps, "eval_steps");
  interval(a.save_steps, "save_steps");
  const auto bounded_steps = static_cast<std::int64_t>(TrainingArguments::kMaxIntervalSteps);
  if (a.max_steps > bounded_steps) {
    throw std::invalid_argument("max_steps is " + std::to_string(a.max_steps) + ", more than the 1e15 fitsum accepts");
  }
  if (a.warmup_steps < 0 || a.warmup_steps > bounded_steps) {
    throw std::invalid_argument("warmup_steps must be in [0, 1e15], got " + std::to_string(a.warmup_steps));
  }
  if (a.max_steps <= 0 && !(a.num_train_epochs > 0 && a.num_train_epochs <= TrainingArguments::kMaxEpochs)) {
    throw std::invalid_argument("num_train_epochs must be in (0, 1e6] when max_steps is not set, got " +
                                number_text(a.num_train_epochs));
  }
}

// seed seeds numpy in HF's set_seed, which takes [0, 2^32 - 1] only; ddp_timeout becomes a steady-clock deadline in
// nanoseconds, which 2^31 - 1 seconds keeps within 64 bits.
void validate_run_values(const TrainingArguments& a) {
  if (a.seed < 0 || a.seed > TrainingArguments::kMaxSeed) {
    throw std::invalid_argument("seed must be in [0, 4294967295] (as HF's set_seed requires), got " +
                                std::to_string(a.seed));
  }
  if (a.ddp_timeout < 1 || a.ddp_timeout > TrainingArguments::kMaxDdpTimeout) {
    throw std::invalid_argument("ddp_timeout must be in [1, 2147483647] (seconds), got " +
                                std::to_string(a.ddp_timeout));
  }
  if (a.save_total_limit && *a.save_total_limit < 1) {
    throw std::invalid_argument("save_total_limit must be at least 1");
  }
  if (a.zero_stage < 0 || a.zero_stage > 2) {
    throw std::invalid_argument("zero_stage is " + std::to_string(a.zero_stage) +
                                ": 0 (no sharding), 1 (optimizer state sharded across the processes) or 2 (gradients "
                                "sharded too)");
  }
  if (a.offloads_optimizer() && a.zero_stage >= 1) {
    throw std::invalid_argument("offload_optimizer cpu with zero_stage " + std::to_string(a.zero_stage) +
                                " is not implemented (the offloaded optimizer keeps the whole state on each host); "
                                "use zero_stage 0 with offload_optimizer cpu, or offload_optimizer none");
  }
  if (!(a.ddp_bucket_cap_mb > 0.0) || a.ddp_bucket_cap_mb > 1048576.0) {
    throw std::invalid_argument("ddp_bucket_cap_mb must be above 0 and at most 1048576 (MiB), got " +
                                number_text(a.ddp_bucket_cap_mb));
  }
  if (!a.ddp_backend.empty() && a.ddp_backend != "gloo" && a.ddp_backend != "nccl") {
    throw std::invalid_argument("ddp_backend '" + a.ddp_backend + "' is not one of gloo (CPU processes), nccl (GPUs)");
  }
}

}  // namespace

void TrainingArguments::validate_lora() const {
  // PEFT's LoraConfig refuses r <= 0; here 0 is the default, no adapters.
  if (lora.r < 0) {
    throw std::invalid_argument("lora_r must be a positive integer (0: no adapters, full fine-tuning), got " +
                                std::to_string(lora.r));
  }
  if (!std::isfinite(lora.lora_alpha)) {
    throw std::invalid_argument("lora_alpha must be a finite number, got " + number_text(lora.lora_alpha));
  }
  if (!(lora.lora_dropout >= 0 && lora.lora_dropout < 1)) {
    throw std::invalid_argument("lora_dropout must be in [0, 1), got " + number_text(lora.lora_dropout));
  }
  for (const auto& [field, names] : {std::pair{"lora_target_modules", &lora.target_modules},
                                     std::pair{"lora_modules_to_save", &lora.modules_to_save}}) {
    for (const auto& name : *names) {
      if (name.empty()) throw std::invalid_argument(std::string(field) + " has an empty module name");
    }
  }
  const auto& targets = lora.target_modules;
  if (targets.size() > 1 && std::find(targets.begin(), targets.end(), "all-linear") != targets.end()) {
    throw std::invalid_argument("lora_target_modules: all-linear stands alone (PEFT takes it only as the whole value)");
  }
  if (base_dtype != "float32" && base_dtype != "bfloat16") {
    throw std::invalid_argument("base_dtype '" + base_dtype + "' is not one of float32, bfloat16");
  }
  if (trains_adapters()) return;
  // A LoRA setting without adapters would be silently ignored: name the first one given.
  const model::LoraConfig defaults;
  const std::pair<const char*, bool> set[] = {
      {"lora_alpha", lora.lora_alpha != defaults.lora_alpha},
      {"lora_dropout", lora.lora_dropout != defaults.lora_dropout},
      {"lora_target_modules", !lora.target_modules.empty()},
      {"lora_bias", lora.bias != defaults.bias},
      {"lora_modules_to_save", !lora.modules_to_save.empty()},
      {"use_rslora", lora.use_rslora != defaults.use_rslora}};
  for (const auto& [field, given] : set) {
    if (given) {
      throw std::invalid_argument(std::string(field) +
                                  " is a LoRA setting, but no adapters are trained: set lora_r (e.g. 16) to train "
                                  "adapters, or adapter_name_or_path to continue a PEFT adapter");
    }
  }
  if (base_dtype == "bfloat16") {
    throw std::invalid_argument(
        "base_dtype bfloat16 holds the frozen base of a LoRA run in bfloat16, but this run trains the whole model "
        "(full fine-tuning keeps float32 weights; use --bf16 for bfloat16 autocast): set lora_r to train adapters");
  }
}

void TrainingArguments::validate() const {
  const auto positive = [](std::int64_t v, const char* field) {
    if (v < 1) throw std::invalid_argument(std::string(field) + " must be at least 1, got " + std::to_string(v));
  };
  // Batch sizes past 2^24 describe no batch that fits any machine; their product (examples per optimizer step) is
  // bounded too, so that it cannot wrap to 0 (a division by zero) or overflow the sampler's arithmetic.
  const auto bounded = [&](std::int64_t v, const char* field) {
    positive(v, field);
    if (v > kMaxBatchSize) {
      throw std::invalid_argument(std::string(field) + " is " + std::to_string(v) + ", more than the " +
                                  std::to_string(kMaxBatchSize) + " fitsum accepts");
    }
  };
  bounded(per_device_train_batch_size, "per_device_train_batch_size");
  bounded(per_device_eval_batch_size, "per_device_eval_batch_size");
  bounded(gradient_accumulation_steps, "gradient_accumulation_steps");
  if (per_device_train_batch_size * gradient_accumulation_steps > kMaxBatchSize) {
    throw std::invalid_argument("per_device_train_batch_size x gradient_accumulation_steps is " +
                                std::to_string(per_device_train_batch_size * gradient_accumulation_steps) +
                                " examples per optimizer step, more than the " + std::to_string(kMaxBatchSize) +
                                " fitsum accepts");
  }
  validate_optimizer_values(*this);
  validate_step_values(*this);
  validate_run_values(*this);
  for (const auto& [field, value] :
       {std::pair{"gradient_checkpointing_layers", gradient_checkpointing_layers},
        std::pair{"gradient_checkpointing_encoder_layers", gradient_checkpointing_encoder_layers},
        std::pair{"gradient_checkpointing_decoder_layers", gradient_checkpointing_decoder_layers}}) {
    if (value && *value < 0) throw std::invalid_argument(std::string(field) + " must not be negative");
  }
  validate_generation(*this);
  if (fp16) {
    throw std::invalid_argument(
        "fp16 is refused: PEGASUS's and T5's activations overflow float16 (the reason HF clamps them and why their "
        "fp16 fine-tunes produce NaN losses), and fitsum has no loss-scaled float16 path; use bf16, which has "
        "float32's range");
  }
  validate_best_model();
  validate_lora();
  if (output_dir.empty()) throw std::invalid_argument("output_dir is required");
}

nlohmann::ordered_json TrainingArguments::to_json() const {
  nlohmann::ordered_json j;
  j["output_dir"] = output_dir;
  j["overwrite_output_dir"] = overwrite_output_dir;
  j["num_train_epochs"] = num_train_epochs;
  j["max_steps"] = max_steps;
  j["per_device_train_batch_size"] = per_device_train_batch_size;
  j["per_device_eval_batch_size"] = per_device_eval_batch_size;
  j["gradient_accumulation_steps"] = gradient_accumulation_steps;
  j["learning_rate"] = learning_rate;
  j["weight_decay"] = weight_decay;
  j["adam_beta1"] = adam_beta1;
  j["adam_beta2"] = adam_beta2;
  j["adam_epsilon"] = adam_epsilon;
  j["max_grad_norm"] = max_grad_norm;
  j["lr_scheduler_type"] = to_string(lr_scheduler_type);
  j["warmup_steps"] = warmup_steps;
  j["warmup_ratio"] = warmup_ratio;
  j["optim"] = optim ? optim::to_string(*optim) : "auto";
  j["label_smoothing_factor"] = label_smoothing_factor;
  j["gradient_checkpointing"] = gradient_checkpointing;
  j["gradient_checkpointing_layers"] =
      gradient_checkpointing_layers ? nlohmann::ordered_json(*gradient_checkpointing_layers) : nullptr;
  j["gradient_checkpointing_encoder_layers"] =
      gradient_checkpointing_encoder_layers ? nlohmann::ordered_json(*gradient_checkpointing_encoder_layers) : nullptr;
  j["gradient_checkpointing_decoder_layers"] =
      gradient_checkpointing_decoder_layers ? nlohmann::ordered_json(*gradient_checkpointing_decoder_layers) : nullptr;
  j["freeze_embeds"] = freeze_embeds;
  j["bf16"] = bf16;
  j["fp16"] = fp16;
  j["logging_strategy"] = to_string(logging_strategy);
  j["logging_steps"] = logging_steps;
  j["logging_first_step"] = logging_first_step;
  j["eval_strategy"] = to_string(eval_strategy);
  j["eval_steps"] = eval_steps ? nlohmann::ordered_json(*eval_steps) : nullptr;
  j["save_strategy"] = to_string(save_strategy);
  j["save_steps"] = save_steps;
  j["save_total_limit"] = save_total_limit ? nlohmann::ordered_json(*save_total_limit) : nullptr;
  j["seed"] = seed;
  j["data_seed"] = data_seed ? nlohmann::ordered_json(*data_seed) : nullptr;
  j["resume_from_checkpoint"] =
      resume_from_checkpoint.empty() ? nullptr : nlohmann::ordered_json(resume_from_checkpoint);
  j["group_by_length"] = group_by_length;
  j["dataloader_drop_last"] = dataloader_drop_last;
  j["dataloader_pin_memory"] = dataloader_pin_memory;
  j["predict_with_generate"] = predict_with_generate;
  j["generation_num_beams"] = generation_num_beams ? nlohmann::ordered_json(*generation_num_beams) : nullptr;
  j["generation_max_length"] = generation_max_length ? nlohmann::ordered_json(*generation_max_length) : nullptr;
  j["rouge_split_sentences"] = rouge_split_sentences;
  j["do_eval"] = do_eval;
  j["do_predict"] = do_predict;
  j["load_best_model_at_end"] = load_best_model_at_end;
  const auto key = best_metric_key();  // as HF resolves them
  j["metric_for_best_model"] = key.empty() ? nullptr : nlohmann::ordered_json(key.substr(5));
  j["greater_is_better"] = key.empty() ? nullptr : nlohmann::ordered_json(best_metric_greater_is_better());
  j["early_stopping_patience"] = early_stopping_patience ? nlohmann::ordered_json(*early_stopping_patience) : nullptr;
  j["early_stopping_threshold"] = early_stopping_threshold;
  j["report_to"] =
      report_to_tensorboard ? nlohmann::ordered_json::array({"tensorboard"}) : nlohmann::ordered_json::array();
  j["logging_dir"] = logging_dir.empty() ? nullptr : nlohmann::ordered_json(logging_dir);
  j["ddp_backend"] = ddp_backend.empty() ? nullptr : nlohmann::ordered_json(ddp_backend);
  j["ddp_timeout"] = ddp_timeout;
  j["zero_stage"] = zero_stage;
  j["ddp_bucket_cap_mb"] = ddp_bucket_cap_mb;
  j["offload_optimizer"] = offload_optimizer ? optim::to_string(*offload_optimizer) : "auto";
  return j;
}

}  // namespace fitsum::train
