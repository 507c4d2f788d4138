// Implements include/fitsum/train/trainer.h. Reads top-down like the loop it is: setup, then per optimizer step
// collate -> forward -> summed token loss / step tokens -> backward (per micro-batch) -> clip -> step -> schedule,
// then log / evaluate / save at their intervals.
#include "fitsum/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <sstream>

#include <torch/torch.h>

#include "fitsum/data/sampler.h"
#include "fitsum/io/checkpoint.h"
#include "fitsum/io/checkpoint_folders.h"
#include "fitsum/io/output_folder_lock.h"
#include "fitsum/io/safetensors.h"
#include "fitsum/io/tensorboard.h"
#include "fitsum/memory/device_memory.h"
#include "fitsum/memory/static_memory.h"
#include "fitsum/model/micro_step.h"
#include "fitsum/optim/optimizer_step.h"
#include "fitsum/optim/optimizers.h"
#include "fitsum/train/device_batch.h"
#include "fitsum/train/diagnostics.h"
#include "fitsum/train/evaluation.h"
#include "fitsum/train/floating_point_ops.h"
#include "fitsum/train/gradient_reducer.h"
#include "fitsum/train/optimizer_offload.h"
#include "fitsum/util/bytes.h"
#include "fitsum/util/files.h"
#include "fitsum/util/random_state.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::train {

namespace {

std::atomic<int> g_stop_signal{0};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::int64_t label_tokens(const data::Example& e) {
  if (!e.labels) return 0;
  return static_cast<std::int64_t>(e.labels->size());  // unpadded labels: every one counts
}

}  // namespace

void request_stop(int signal_number) { g_stop_signal.store(signal_number); }

int requested_stop_signal() { return g_stop_signal.load(); }

Trainer::Trainer(TrainingArguments args, TrainerInputs inputs, TrainerCallbacks callbacks)
    : args_(std::move(args)), in_(std::move(inputs)), callbacks_(std::move(callbacks)) {
  args_.validate();
  if (in_.train_examples.empty()) throw std::invalid_argument("the training set is empty");
  for (const auto& e : in_.train_examples) {
    if (!e.labels) {
      throw std::invalid_argument("training example at line " + std::to_string(e.line) +
                                  " has no labels (the summary column is missing)");
    }
  }
  auto& model = *in_.model;
  model.to(in_.device);
  head_bias_nonzero_ = kernels::bias_has_nonzero(model.final_logits_bias);  // a buffer nobody trains: read once
  if (args_.gradient_checkpointing) {
    const auto [encoder_layers, decoder_layers] = args_.checkpointed_layers();
    model.set_gradient_checkpointing(encoder_layers, decoder_layers);
  }
  // Before the optimizer is made: a frozen embedding gets no gradient and no optimizer state.
  if (args_.freeze_embeds) model.model->shared->weight.set_requires_grad(false);

  optim::OptimizerSettings settings;
  settings.type = args_.optimizer();
  settings.learning_rate = args_.learning_rate;
  settings.weight_decay = args_.weight_decay;
  settings.adam_beta1 = args_.adam_beta1;
  settings.adam_beta2 = args_.adam_beta2;
  settings.adam_epsilon = args_.adam_epsilon;
  parameters_ = optim::trainable_parameters(model);
  non_embedding_parameters_ = non_embedding_parameter_count(model);
  for (const auto& [name, p] : parameters_) parameter_list_.push_back(p);
  join_process_group();
  offload_ = make_optimizer_offload(args_, parameters_, in_.device);
  optimizer_ = optim::make_optimizer(model, settings, owned_parameter_names(),
                                     offload_ ? &offload_->host_parameters() : nullptr);

  sampler_ = sampler_options();
  steps_per_epoch_ = static_cast<std::int64_t>(data::steps_per_epoch(in_.train_examples.size(), sampler_));
  max_steps_ = args_.max_steps > 0 ? args_.max_steps
                                   : static_cast<std::int64_t>(std::ceil(args_.num_train_epochs * steps_per_epoch_));
  num_epochs_ = (max_steps_ + steps_per_epoch_ - 1) / steps_per_epoch_;
  logging_steps_ = TrainingArguments::interval_in_steps(args_.logging_steps, max_steps_);
  eval_steps_ = TrainingArguments::interval_in_steps(args_.eval_steps.value_or(args_.logging_steps), max_steps_);
  save_steps_ = TrainingArguments::interval_in_steps(args_.save_steps, max_steps_);

  schedule_.type = args_.lr_scheduler_type;
  schedule_.base_lr = args_.learning_rate;
  schedule_.total_steps = max_steps_;
  schedule_.warmup_steps = warmup_steps_for(args_.warmup_steps, args_.warmup_ratio, max_steps_);
}

Trainer::~Trainer() = default;

void Trainer::log(nlohmann::ordered_json entry) {
  log_history_.push_back(entry);
  write_trainer_state();  // a run that dies later still leaves its history (HF writes it at saves only)
  if (tensorboard_) {     // HF's TensorBoardCallback.on_log: every number, tagged by rewrite_logs, at the global step
    for (const auto& item : entry.items()) {
      if (item.key() != "step" && item.value().is_number()) {
        tensorboard_->add_scalar(io::hf_tensorboard_tag(item.key()), item.value().get<double>(), global_step_);
      }
    }
    tensorboard_->flush();
  }
  if (callbacks_.on_log) callbacks_.on_log(entry);
}

Trainer::StepOutcome Trainer::run_step(const std::vector<std::vector<std::size_t>>& planned) {
  // The denominator of the exact accumulated loss: every label token of the whole optimizer step. Splitting a
  // micro-batch after an out-of-memory error changes neither it nor the examples the step covers.
  std::int64_t step_tokens = 0;
  for (const auto& mb : planned) {
    for (auto i : mb) step_tokens += label_tokens(in_.train_examples[i]);
  }
  if (step_tokens == 0) throw std::runtime_error("an optimizer step has no label tokens");
  const double denominator = static_cast<double>(step_tokens);
  oom_splits_in_step_ = 0;
  auto accumulated = gradients_sharded() ? accumulate_sharded(planned, denominator) : accumulate(planned, denominator);
  auto& outcome = accumulated.outcome;
  reduce_step(outcome, accumulated.loss_sum, accumulated.samples);
  train_samples_ += accumulated.samples;
  if (outcome.interrupted) return outcome;
  // Divided by a tensor, not a scalar: CUDA multiplies by a scalar's reciprocal, which rounds differently.
  outcome.loss = accumulated.loss_sum.div(torch::full({}, denominator, accumulated.loss_sum.options()));
  outcome.grad_norm = update_parameters().to(torch::kDouble);
  return outcome;
}

kernels::TokenLoss Trainer::micro_batch_forward(const std::vector<std::size_t>& examples, double loss_scale,
                                              std::int64_t& input_tokens, std::int64_t& input_elements) {
  DeviceBatchOptions transfer;
  transfer.device = in_.device;
  transfer.vocab_size = in_.model->config().vocab_size;
  transfer.pin_memory = args_.dataloader_pin_memory;
  transfer.bias_nonzero = head_bias_nonzero_;
  const auto batch = to_device(data::collate(in_.train_examples, examples, in_.collator), transfer);
  model::MicroBatchOptions options;
  options.loss_scale = loss_scale;
  options.label_smoothing = args_.label_smoothing_factor;
  options.bf16 = args_.bf16;
  options.known = &batch.known;
  auto token_loss = model::micro_batch_loss(*in_.model, batch.input_ids, batch.attention_mask, batch.labels, options);
  input_tokens = batch.input_tokens;
  input_elements = batch.input_elements;  // padding included, as HF's estimate_tokens counts input_ids.numel()
  return token_loss;
}

Trainer::Accumulated Trainer::accumulate(const std::vector<std::vector<std::size_t>>& step, double denominator) {
  auto micro_batches = own_micro_batches(step);
  const auto step_rng = util::random_state(in_.device);
  for (;;) {  // one pass per attempt: redone only when an out-of-memory error hit a backward
    Accumulated done;
    done.loss_sum = torch::zeros({}, torch::TensorOptions(torch::kDouble).device(in_.device));
    bool redo = false;
    for (std::size_t i = 0; i < micro_batches.size();) {
      const auto mb = micro_batches[i];
      const auto micro_rng = util::random_state(in_.device);
      kernels::TokenLoss token_loss;
      std::int64_t input_tokens = 0;
      std::int64_t input_elements = 0;
      try {
        token_loss = micro_batch_forward(mb, 1.0 / denominator, input_tokens, input_elements);
      } catch (const c10::OutOfMemoryError& e) {
        // The forward's tensors were freed as its scope unwound; no gradient was touched: retry in halves.
        split_after_oom(micro_batches, i, "forward", "carrying on", e);
        util::set_random_state(in_.device, micro_rng);
        continue;
      }
      try {
        if (reducer_) reducer_->begin_backward(i + 1 == micro_batches.size());
        (token_loss.sum * (1.0 / denominator)).backward();
        if (reducer_) reducer_->end_backward();
      } catch (const c10::OutOfMemoryError& e) {
        // Part of this micro-batch's gradient may already be accumulated: redo the whole step from its start (the
        // buckets already summed over the processes stay summed; the others only wait for the rest).
        token_loss = {};
        split_after_oom(micro_batches, i, "backward", "redoing the step", e);
        if (reducer_) {
          reducer_->abandon();
        } else {
          zero_gradients();
        }
        util::set_random_state(in_.device, step_rng);
        redo = true;
        break;
      }
      done.loss_sum.add_(token_loss.sum.detach().to(torch::kDouble));  // on the device: read at the next log
      done.outcome.tokens += input_tokens + token_loss.tokens;
      done.outcome.input_elements += input_elements;
      done.samples += static_cast<std::int64_t>(mb.size());
      ++i;
      if (callbacks_.on_micro_batch) callbacks_.on_micro_batch(i, micro_batches.size());
      if (g_stop_signal.load() != 0) {
        done.outcome.interrupted = true;
        break;
      }
    }
    if (redo) continue;
    if (reducer_) reducer_->finish();  // stopped before its last micro-batch, or none: every process sums once
    return done;
  }
}

bool Trainer::fully_checkpointed() const {
  if (!args_.gradient_checkpointing) return false;
  const auto& config = in_.model->config();
  const auto [encoder_layers, decoder_layers] = args_.checkpointed_layers();
  return encoder_layers >= config.encoder_layers && decoder_layers >= config.decoder_layers;
}

void Trainer::split_after_oom(std::vector<std::vector<std::size_t>>& micro_batches, std::size_t index,
                              const char* phase, const char* then, const c10::OutOfMemoryError& error) {
  auto& mb = micro_batches[index];
  oom_splits_in_step_ += 1;
  oom_splits_since_log_ += 1;
  const std::string where = std::string("out of memory in the ") + phase + " of a micro-batch of " +
                            std::to_string(mb.size()) + " examples at step " + std::to_string(global_step_ + 1);
  if (mb.size() < 2) {
    if (fully_checkpointed()) {  // nothing left to split or recompute: train() explains what held the memory
      TORCH_CHECK_WITH(OutOfMemoryError, false, where,
                       ": even one example with gradient checkpointing of all layers does not fit; ",
                       error.what_without_backtrace());
    }
    args_.set_checkpointed_layers(std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::max());
    in_.model->set_gradient_checkpointing(std::numeric_limits<std::int64_t>::max(),
                                          std::numeric_limits<std::int64_t>::max());
    if (callbacks_.on_message)
      callbacks_.on_message(where +
                            ": one example cannot be split; retrying with "
                            "gradient checkpointing of all layers");
    return;
  }
  const auto half = static_cast<std::ptrdiff_t>(mb.size() / 2);
  std::vector<std::size_t> first(mb.begin(), mb.begin() + half), second(mb.begin() + half, mb.end());
  if (callbacks_.on_message) {
    callbacks_.on_message(where + ": split into " + std::to_string(first.size()) + " + " +
                          std::to_string(second.size()) + ", " + then + " (same examples, same update)");
  }
  micro_batches[index] = std::move(second);
  micro_batches.insert(micro_batches.begin() + static_cast<std::ptrdiff_t>(index), std::move(first));
}

bool Trainer::replan_after_repeated_oom() {
  std::string change;
  if (!fully_checkpointed()) {
    args_.set_checkpointed_layers(std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::max());
    in_.model->set_gradient_checkpointing(std::numeric_limits<std::int64_t>::max(),
                                          std::numeric_limits<std::int64_t>::max());
    change = "gradient checkpointing of all layers";
  } else if (args_.per_device_train_batch_size > 1 && args_.per_device_train_batch_size % 2 == 0) {
    args_.per_device_train_batch_size /= 2;
    args_.gradient_accumulation_steps *= 2;
    change = "per_device_train_batch_size " + std::to_string(args_.per_device_train_batch_size) +
             " gradient_accumulation_steps " + std::to_string(args_.gradient_accumulation_steps) +
             " (same effective batch)";
  } else {
    return false;
  }
  if (callbacks_.on_message) {
    callbacks_.on_message("out of memory in " + std::to_string(oom_steps_in_a_row_) +
                          " steps in a row: re-planned with " + change);
  }
  oom_steps_in_a_row_ = 0;
  return true;
}

generate::GenerationOptions evaluation_generation(const TrainingArguments& args,
                                                  const generate::GenerationOptions& model_defaults) {
  auto options = model_defaults;
  if (args.generation_num_beams) options.num_beams = *args.generation_num_beams;
  if (args.generation_max_length) options.max_length = *args.generation_max_length;
  return options;
}

nlohmann::ordered_json Trainer::evaluate() {
  const auto result = run_evaluation(in_.eval_examples);
  if (result.interrupted) return nullptr;  // a stop request: the step's checkpoint is saved next, not partial metrics
  return evaluation_metrics(result, args_.predict_with_generate);
}

EvaluationResult Trainer::run_evaluation(const std::vector<data::Example>& examples) {
  EvaluationOptions options;
  options.batch_size = args_.per_device_eval_batch_size;
  options.generate = args_.predict_with_generate;
  options.generation = evaluation_generation(args_, in_.generation);
  options.label_smoothing = args_.label_smoothing_factor;
  options.bf16 = args_.bf16;
  options.rouge.split_sentences = args_.rouge_split_sentences;
  options.collator = in_.collator;
  options.on_progress = callbacks_.on_evaluation;
  options.should_stop = [] { return g_stop_signal.load() != 0; };
  shard_evaluation(options);
  return evaluate_model(*in_.model, examples, in_.tokenizer.get(), options, in_.device);
}

void Trainer::begin_run() {
  if (main_process_) {  // the one process that writes into output_dir, under its lock from here to the end
    if (!in_.output_dir_lock) in_.output_dir_lock = std::make_shared<io::OutputFolderLock>(args_.output_dir);
    io::prepare_output_folder(*in_.output_dir_lock, args_.overwrite_output_dir && args_.resume_from_checkpoint.empty(),
                              run_inputs(), {callbacks_.on_message, [this](const std::string& line) { warn(line); }});
  }
  g_stop_signal.store(0);
  if (args_.report_to_tensorboard && main_process_) {
    const auto dir =
        args_.logging_dir.empty() ? io::default_logging_dir(args_.output_dir) : fs::path(args_.logging_dir);
    tensorboard_ = std::make_unique<io::TensorBoardWriter>(dir);
    if (callbacks_.on_message) callbacks_.on_message("TensorBoard events: " + tensorboard_->file().string());
  }
  memory::start_tracking(in_.device);
  torch::manual_seed(static_cast<std::uint64_t>(args_.seed));  // HF set_seed: dropout draws start here
  if (!args_.resume_from_checkpoint.empty()) {
    resume(resolve_checkpoint(args_.resume_from_checkpoint, args_.output_dir));
  }
  if (offload_) offload_->pull_weights();  // the host copies of the weights a resume loaded
  start_step_ = global_step_;
  if (global_step_ >= max_steps_ && callbacks_.on_message) {
    callbacks_.on_message("nothing left to train: the run resumed at step " + std::to_string(global_step_) +
                          " and max_steps is " + std::to_string(max_steps_) +
                          " (raise max_steps or num_train_epochs to train further)");
  }
  in_.model->train();
  statistics_.start(in_.device, loss_since_log_, total_loss_, last_grad_norm_);
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(schedule_.lr(global_step_));
  memory::reset_peak_memory(in_.device);
  log_start_ = Clock::now();
  if (callbacks_.on_step) callbacks_.on_step(global_step_, max_steps_);  // where this run starts
}

void Trainer::record_step(const StepOutcome& outcome) {
  global_step_ += 1;
  step_in_epoch_ += 1;
  oom_steps_in_a_row_ = oom_splits_in_step_ > 0 ? oom_steps_in_a_row_ + 1 : 0;
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(schedule_.lr(global_step_));
  statistics_.add(global_step_, outcome.loss, outcome.grad_norm);
  steps_since_log_ += 1;
  tokens_since_log_ += outcome.tokens;
  train_tokens_ += outcome.tokens;
  total_flos_ += floating_point_ops(outcome.input_elements, non_embedding_parameters_);
  if (callbacks_.on_step) callbacks_.on_step(global_step_, max_steps_);
}

bool Trainer::due(IntervalStrategy strategy, std::int64_t every, bool end_of_epoch) const {
  return (strategy == IntervalStrategy::steps && global_step_ % every == 0) ||
         (strategy == IntervalStrategy::epoch && end_of_epoch);
}

void Trainer::read_step_statistics() {
  if (!statistics_.unread()) return;
  const auto read = statistics_.read();
  loss_since_log_ = read.loss_since_log;
  total_loss_ = read.total_loss;
  last_grad_norm_ = read.last_grad_norm;
  if (read.non_finite_step > 0) {
    stop_on_non_finite(read.non_finite_step, read.non_finite_loss, read.non_finite_grad_norm, *in_.model);
  }
}

void Trainer::log_training(double epoch_value) {
  read_step_statistics();
  const double seconds = seconds_since(log_start_);
  const auto mem = memory::read_memory(in_.device);
  nlohmann::ordered_json entry;
  entry["loss"] = loss_since_log_ / static_cast<double>(std::max<std::int64_t>(1, steps_since_log_));
  entry["grad_norm"] = last_grad_norm_;
  // The rate the step just taken used (transformers >= 4.51, huggingface/transformers#36973; earlier versions
  // logged the next step's rate, docs/hf.md).
  entry["learning_rate"] = schedule_.lr(global_step_ - 1);
  entry["epoch"] = epoch_value;
  entry["step"] = global_step_;
  entry["tokens_per_second"] = seconds > 0 ? static_cast<double>(tokens_since_log_) / seconds : 0.0;
  if (in_.predicted_peak_bytes) entry["predicted_peak_bytes"] = *in_.predicted_peak_bytes;
  entry["peak_memory_bytes"] = mem.peak_bytes;
  if (offload_) entry["peak_host_memory_bytes"] = offload_->peak_host_bytes();
  if (oom_splits_since_log_ > 0) entry["oom_splits"] = oom_splits_since_log_;
  oom_splits_since_log_ = 0;
  if (in_.device.is_cuda()) {
    entry["peak_reserved_bytes"] = mem.peak_reserved_bytes;
    entry["alloc_retries"] = mem.alloc_retries;
    entry["ooms"] = mem.ooms;
  }
  log(entry);
  loss_since_log_ = 0.0;
  statistics_.reset_since_log();
  steps_since_log_ = 0;
  tokens_since_log_ = 0;
  memory::reset_peak_memory(in_.device);
  log_start_ = Clock::now();
}

// After an optimizer step: log, evaluate and save at their intervals (HF's DefaultFlowCallback).
void Trainer::after_step(bool end_of_epoch, double epoch_value) {
  const bool last = global_step_ == max_steps_;
  if (due(args_.logging_strategy, logging_steps_, end_of_epoch) ||
      (last && args_.logging_strategy != IntervalStrategy::no) || (args_.logging_first_step && global_step_ == 1)) {
    log_training(epoch_value);
  }
  if (!in_.eval_examples.empty() && due(args_.eval_strategy, eval_steps_, end_of_epoch)) {
    read_step_statistics();  // a diverged run stops before it evaluates
    // Every process evaluates its share and has the metrics (and whether a stop request interrupted them); rank 0
    // logs them and judges the best model and early stopping, whose verdict reaches every process, so that all take
    // the same path to the next collective.
    const bool completed = evaluate_and_record(epoch_value);
    share_early_stopping();
    if (!completed) return;
  }
  if (due(args_.save_strategy, save_steps_, end_of_epoch)) save_checkpoint(util::random_state(in_.device));
}

bool Trainer::evaluate_and_record(double epoch_value) {
  auto entry = evaluate();
  if (entry.is_null()) return false;  // a stop request (on any process) interrupted it
  if (!main_process_) return true;
  const double seconds = entry["eval_runtime"].get<double>();
  record_evaluation(entry);
  entry["epoch"] = epoch_value;
  entry["step"] = global_step_;
  log(entry);
  // Evaluation time is not training time: tokens_per_second of the next log leaves it out.
  log_start_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  return true;
}

// One epoch from step_in_epoch_ on, until its end or max_steps. False when a stop request ended it (a checkpoint
// of the last completed step is saved).
bool Trainer::run_epoch(const std::vector<std::size_t>& lengths) {
  // Each step holds every process's examples; run_step takes this one's, in micro-batches of the current size (a
  // re-plan after out-of-memory errors changes the micro-batches, never a step's examples).
  const auto steps =
      data::plan_epoch(data::epoch_order(lengths, sampler_, static_cast<std::uint64_t>(epoch_)), sampler_);
  while (step_in_epoch_ < static_cast<std::int64_t>(steps.size()) && global_step_ < max_steps_) {
    if (stop_requested()) {  // a stop request between steps (during evaluation or a save)
      if (saved_step_ != global_step_) save_checkpoint(util::random_state(in_.device));
      return false;
    }
    // The random state at the start of the step: an interrupted step is redone from it on resume.
    const auto step_rng = util::random_state(in_.device);
    const auto outcome = run_step(steps[static_cast<std::size_t>(step_in_epoch_)]);
    if (outcome.interrupted) {
      zero_gradients();
      util::set_random_state(in_.device, step_rng);
      save_checkpoint(step_rng);
      return false;
    }
    record_step(outcome);
    if (oom_steps_in_a_row_ >= 2) replan_after_repeated_oom();
    const bool end_of_epoch = step_in_epoch_ == static_cast<std::int64_t>(steps.size());
    const double epoch_value =
        static_cast<double>(epoch_) + static_cast<double>(step_in_epoch_) / static_cast<double>(steps.size());
    after_step(end_of_epoch, epoch_value);
    if (stop_early_) break;
  }
  if (step_in_epoch_ >= static_cast<std::int64_t>(steps.size())) {
    epoch_ += 1;
    step_in_epoch_ = 0;
  }
  return true;
}

TrainResult Trainer::finish_run() {
  read_step_statistics();
  nlohmann::ordered_json summary;
  summary["epoch"] = static_cast<double>(global_step_) / static_cast<double>(steps_per_epoch_);
  summary["step"] = global_step_;
  summary["train_runtime"] = train_seconds_;
  // Rates of what this run trained (a resumed run's earlier steps took no time here); nothing trained: 0, not a
  // count over a few microseconds.
  const auto per_second = [this](std::int64_t count) {
    return count > 0 && train_seconds_ > 0 ? static_cast<double>(count) / train_seconds_ : 0.0;
  };
  summary["train_samples_per_second"] = per_second(train_samples_);
  summary["train_steps_per_second"] = per_second(global_step_ - start_step_);
  summary["train_tokens_per_second"] = per_second(train_tokens_);
  summary["total_flos"] = total_flos_;
  summary["train_loss"] = global_step_ ? total_loss_ / static_cast<double>(global_step_) : 0.0;
  load_best_model();  // before the summary is logged, as HF's _inner_training_loop does
  log(summary);
  save_final_model();
  TrainResult result;
  result.global_step = global_step_;
  result.start_step = start_step_;
  result.metrics = summary;
  result.stopped_early = stop_early_;
  write_run_results(result);
  return result;
}

TrainResult Trainer::train() {
  begin_run();
  const auto lengths = data::input_lengths(in_.train_examples);
  const auto run_start = Clock::now();
  try {
    while (global_step_ < max_steps_ && !stop_early_) {
      if (!run_epoch(lengths)) {
        train_seconds_ += seconds_since(run_start);
        TrainResult result;
        result.interrupted = true;
        result.stop_signal = g_stop_signal.load();
        result.global_step = global_step_;
        return result;
      }
    }
  } catch (const c10::OutOfMemoryError& e) {
    const auto mem = memory::read_memory(in_.device);
    throw std::runtime_error(
        out_of_memory_advice(std::string(e.what_without_backtrace()).substr(0, 600), in_.model->config(), args_, mem));
  }
  train_seconds_ += seconds_since(run_start);
  return finish_run();
}

}  // namespace fitsum::train
