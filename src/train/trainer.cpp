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
#include "fitsum/io/safetensors.h"
#include "fitsum/memory/device_memory.h"
#include "fitsum/memory/static_memory.h"
#include "fitsum/model/micro_step.h"
#include "fitsum/optim/optimizer_step.h"
#include "fitsum/optim/optimizers.h"
#include "fitsum/train/diagnostics.h"
#include "fitsum/train/evaluation.h"
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

fs::path Trainer::resolve_checkpoint(const std::string& resume_from_checkpoint, const fs::path& output_dir) {
  if (resume_from_checkpoint == "latest" || resume_from_checkpoint == "true") {
    const auto found = io::list_checkpoints(output_dir);
    if (found.empty()) {
      throw std::runtime_error("resume_from_checkpoint latest: no checkpoint-N folder in '" + output_dir.string() +
                               "'");
    }
    return found.back();
  }
  const fs::path dir(resume_from_checkpoint);
  if (!fs::is_directory(dir) || !fs::exists(dir / "trainer_state.json")) {
    throw std::runtime_error("resume_from_checkpoint '" + resume_from_checkpoint +
                             "' is not a checkpoint folder (it needs trainer_state.json); use 'latest' for the "
                             "newest in output_dir");
  }
  return dir;
}

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
  if (args_.gradient_checkpointing) {
    const auto [encoder_layers, decoder_layers] = args_.checkpointed_layers();
    model.set_gradient_checkpointing(encoder_layers, decoder_layers);
  }
  // Before the optimizer is made: a frozen embedding gets no gradient and no optimizer state.
  if (args_.freeze_embeds) model.model->shared->weight.set_requires_grad(false);

  const auto examples = static_cast<std::int64_t>(in_.train_examples.size());
  const auto per_step = args_.per_device_train_batch_size * args_.gradient_accumulation_steps;
  steps_per_epoch_ = (examples + per_step - 1) / per_step;
  max_steps_ = args_.max_steps > 0 ? args_.max_steps
                                   : static_cast<std::int64_t>(std::ceil(args_.num_train_epochs * steps_per_epoch_));
  num_epochs_ = (max_steps_ + steps_per_epoch_ - 1) / steps_per_epoch_;
  logging_steps_ = TrainingArguments::interval_in_steps(args_.logging_steps, max_steps_);
  eval_steps_ = TrainingArguments::interval_in_steps(args_.eval_steps.value_or(args_.logging_steps), max_steps_);
  save_steps_ = TrainingArguments::interval_in_steps(args_.save_steps, max_steps_);

  optim::OptimizerSettings settings;
  settings.type = args_.optimizer();
  settings.learning_rate = args_.learning_rate;
  settings.weight_decay = args_.weight_decay;
  settings.adam_beta1 = args_.adam_beta1;
  settings.adam_beta2 = args_.adam_beta2;
  settings.adam_epsilon = args_.adam_epsilon;
  optimizer_ = optim::make_optimizer(model, settings);
  parameters_ = optim::trainable_parameters(model);
  for (const auto& [name, p] : parameters_) parameter_list_.push_back(p);

  schedule_.type = args_.lr_scheduler_type;
  schedule_.base_lr = args_.learning_rate;
  schedule_.total_steps = max_steps_;
  schedule_.warmup_steps = warmup_steps_for(args_.warmup_steps, args_.warmup_ratio, max_steps_);
}

void Trainer::log(nlohmann::ordered_json entry) {
  log_history_.push_back(entry);
  if (callbacks_.on_log) callbacks_.on_log(entry);
}

Trainer::StepOutcome Trainer::run_step(const std::vector<std::vector<std::size_t>>& planned) {
  auto& model = *in_.model;
  // The denominator of the exact accumulated loss: every label token of the whole optimizer step. Splitting a
  // micro-batch after an out-of-memory error changes neither it nor the examples the step covers.
  std::int64_t step_tokens = 0;
  for (const auto& mb : planned) {
    for (auto i : mb) step_tokens += label_tokens(in_.train_examples[i]);
  }
  if (step_tokens == 0) throw std::runtime_error("an optimizer step has no label tokens");
  const double denominator = static_cast<double>(step_tokens);
  auto micro_batches = planned;
  const auto step_rng = util::random_state(in_.device);
  oom_splits_in_step_ = 0;
  for (;;) {  // one pass per attempt: redone only when an out-of-memory error hit a backward
    StepOutcome outcome;
    double loss_sum = 0.0;
    std::int64_t samples = 0;
    bool redo = false;
    for (std::size_t i = 0; i < micro_batches.size();) {
      const auto mb = micro_batches[i];
      auto batch = data::collate(in_.train_examples, mb, in_.collator);
      auto ids = batch.input_ids.to(in_.device);
      auto mask = batch.attention_mask.to(in_.device);
      auto labels = batch.labels.to(in_.device);
      const auto micro_rng = util::random_state(in_.device);
      model::TokenLoss token_loss;
      model::MicroBatchOptions options;
      options.loss_scale = 1.0 / denominator;
      options.label_smoothing = args_.label_smoothing_factor;
      options.bf16 = args_.bf16;
      try {
        token_loss = model::micro_batch_loss(model, ids, mask, labels, options);
      } catch (const c10::OutOfMemoryError& e) {
        // The forward's tensors were freed as its scope unwound; no gradient was touched: retry in halves.
        token_loss = {};
        split_after_oom(micro_batches, i, "forward", e);
        util::set_random_state(in_.device, micro_rng);
        continue;
      }
      try {
        (token_loss.sum * options.loss_scale).backward();
      } catch (const c10::OutOfMemoryError& e) {
        // Part of this micro-batch's gradient may already be accumulated: redo the whole step from its start.
        token_loss = {};
        split_after_oom(micro_batches, i, "backward", e);
        optimizer_->zero_grad();
        util::set_random_state(in_.device, step_rng);
        redo = true;
        break;
      }
      loss_sum += token_loss.sum.item<double>();
      outcome.tokens += mask.sum().item<std::int64_t>() + token_loss.tokens;
      samples += static_cast<std::int64_t>(mb.size());
      ++i;
      if (callbacks_.on_micro_batch) callbacks_.on_micro_batch(i, micro_batches.size());
      if (g_stop_signal.load() != 0) {
        train_samples_ += samples;
        outcome.interrupted = true;
        return outcome;
      }
    }
    if (redo) continue;
    train_samples_ += samples;
    outcome.loss = loss_sum / denominator;
    optim::UpdateOptions update;
    update.max_grad_norm = args_.max_grad_norm;
    update.threads = in_.update_threads;
    outcome.grad_norm = optim::optimizer_step(*optimizer_, parameter_list_, update);
    return outcome;
  }
}

bool Trainer::fully_checkpointed() const {
  if (!args_.gradient_checkpointing) return false;
  const auto& config = in_.model->config();
  const auto [encoder_layers, decoder_layers] = args_.checkpointed_layers();
  return encoder_layers >= config.encoder_layers && decoder_layers >= config.decoder_layers;
}

void Trainer::split_after_oom(std::vector<std::vector<std::size_t>>& micro_batches, std::size_t index,
                              const char* phase, const c10::OutOfMemoryError& error) {
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
    callbacks_.on_message(
        where + ": split into " + std::to_string(first.size()) + " + " + std::to_string(second.size()) +
        (std::string(phase) == "backward" ? ", redoing the step" : ", carrying on") + " (same examples, same update)");
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

nlohmann::ordered_json Trainer::evaluate() {
  EvaluationOptions options;
  options.batch_size = args_.per_device_eval_batch_size;
  options.generate = args_.predict_with_generate;
  options.generation = in_.generation;
  if (args_.generation_num_beams) options.generation.num_beams = *args_.generation_num_beams;
  if (args_.generation_max_length) options.generation.max_length = *args_.generation_max_length;
  options.label_smoothing = args_.label_smoothing_factor;
  options.bf16 = args_.bf16;
  options.collator = in_.collator;
  options.on_progress = callbacks_.on_evaluation;
  options.should_stop = [] { return g_stop_signal.load() != 0; };
  const auto result = evaluate_model(*in_.model, in_.eval_examples, in_.tokenizer.get(), options, in_.device);
  if (result.interrupted) return nullptr;  // a stop request: the step's checkpoint is saved next, not partial metrics
  return evaluation_metrics(result, args_.predict_with_generate);
}

nlohmann::ordered_json Trainer::trainer_state_json() const {
  nlohmann::ordered_json s;
  s["best_metric"] = nullptr;
  s["best_model_checkpoint"] = nullptr;
  s["epoch"] = static_cast<double>(global_step_) / static_cast<double>(steps_per_epoch_);
  s["eval_steps"] = eval_steps_;
  s["global_step"] = global_step_;
  s["is_hyper_param_search"] = false;
  s["is_local_process_zero"] = true;
  s["is_world_process_zero"] = true;
  s["log_history"] = log_history_;
  s["logging_steps"] = logging_steps_;
  s["max_steps"] = max_steps_;
  s["num_input_tokens_seen"] = 0;
  s["num_train_epochs"] = num_epochs_;
  s["save_steps"] = save_steps_;
  s["total_flos"] = 0;
  s["train_batch_size"] = args_.per_device_train_batch_size;
  s["trial_name"] = nullptr;
  s["trial_params"] = nullptr;
  return s;
}

void Trainer::save_checkpoint(const torch::Tensor& rng) {
  const fs::path output_dir(args_.output_dir);
  const auto temp_dir = io::begin_checkpoint(output_dir, global_step_);
  fs::path final_dir;
  try {
    write_checkpoint_files(temp_dir, rng);
    final_dir = io::commit_checkpoint(temp_dir, global_step_);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(temp_dir, ignored);  // a full or failing disk leaves no folder behind
    throw;
  }
  saved_step_ = global_step_;
  if (callbacks_.on_message) callbacks_.on_message("saved " + final_dir.string());
  if (args_.save_total_limit) {
    auto all = io::list_checkpoints(output_dir);
    while (static_cast<std::int64_t>(all.size()) > *args_.save_total_limit) {
      io::remove_checkpoint(all.front());
      if (callbacks_.on_message) callbacks_.on_message("removed " + all.front().string() + " (save_total_limit)");
      all.erase(all.begin());
    }
  }
}

void Trainer::write_checkpoint_files(const fs::path& temp_dir, const torch::Tensor& rng) {
  io::SaveOptions save;
  save.config_json = in_.config_json;
  save.copy_tokenizer_from = in_.tokenizer_dir;
  io::save_model_folder(*in_.model, temp_dir, save);
  io::write_safetensors(temp_dir / "optimizer.safetensors", optim::export_optimizer_state(*optimizer_, parameters_),
                        {{"format", "fitsum-optimizer"}, {"optim", optim::to_string(args_.optimizer())}});
  io::write_safetensors(temp_dir / "rng_state.safetensors", {{"generator", rng}}, {{"device", in_.device.str()}});
  nlohmann::ordered_json scheduler = {{"lr_scheduler_type", to_string(schedule_.type)},
                                      {"last_epoch", global_step_},
                                      {"warmup_steps", schedule_.warmup_steps},
                                      {"total_steps", schedule_.total_steps},
                                      {"learning_rate", schedule_.lr(global_step_)}};
  util::write_file_atomic(temp_dir / "scheduler.json", scheduler.dump(2) + "\n");
  util::write_file_atomic(temp_dir / "trainer_state.json", trainer_state_json().dump(2) + "\n");
  util::write_file_atomic(temp_dir / "training_args.json", args_.to_json().dump(2) + "\n");
  nlohmann::ordered_json position = {
      {"epoch", epoch_},
      {"step_in_epoch", step_in_epoch_},
      {"global_step", global_step_},
      {"loss_since_log", loss_since_log_},
      {"steps_since_log", steps_since_log_},
      {"total_loss", total_loss_},
      {"last_grad_norm", last_grad_norm_},
      {"seed", args_.seed},
      {"data_seed", args_.data_seed.value_or(args_.seed)},
      {"train_examples", in_.train_examples.size()},
      {"examples_per_step", args_.per_device_train_batch_size * args_.gradient_accumulation_steps}};
  util::write_file_atomic(temp_dir / "fitsum_state.json", position.dump(2) + "\n");
}

void Trainer::resume(const fs::path& checkpoint) {
  auto folder = io::open_model_folder(checkpoint);
  io::load_weights(*in_.model, folder);
  in_.model->to(in_.device);

  const auto position = util::read_json_file(checkpoint / "fitsum_state.json");
  const auto per_step = args_.per_device_train_batch_size * args_.gradient_accumulation_steps;
  const auto data_seed = args_.data_seed.value_or(args_.seed);
  if (position.at("seed").get<std::int64_t>() != args_.seed ||
      position.value("data_seed", position.at("seed").get<std::int64_t>()) != data_seed ||
      position.at("train_examples").get<std::size_t>() != in_.train_examples.size() ||
      position.at("examples_per_step").get<std::int64_t>() != per_step) {
    throw std::invalid_argument("cannot resume exactly from '" + checkpoint.string() + "': it was made with seed " +
                                position.at("seed").dump() + ", " + position.at("train_examples").dump() +
                                " training examples and " + position.at("examples_per_step").dump() +
                                " examples per optimizer step; now they are " + std::to_string(args_.seed) + ", " +
                                std::to_string(in_.train_examples.size()) + " and " + std::to_string(per_step));
  }
  epoch_ = position.at("epoch");
  step_in_epoch_ = position.at("step_in_epoch");
  global_step_ = position.at("global_step");
  loss_since_log_ = position.at("loss_since_log");
  steps_since_log_ = position.at("steps_since_log");
  total_loss_ = position.at("total_loss");
  last_grad_norm_ = position.at("last_grad_norm");
  io::check_checkpoint_position(checkpoint / "fitsum_state.json", epoch_, step_in_epoch_, global_step_,
                                steps_per_epoch_);
  const auto state = util::read_json_file(checkpoint / "trainer_state.json");
  log_history_ = nlohmann::ordered_json::parse(state.at("log_history").dump());

  io::SafetensorsReader optimizer_file(checkpoint / "optimizer.safetensors");
  std::map<std::string, torch::Tensor> optimizer_state;
  for (const auto& e : optimizer_file.entries()) optimizer_state[e.name] = optimizer_file.read(e.name).to(in_.device);
  optim::import_optimizer_state(*optimizer_, parameters_, optimizer_state);
  io::SafetensorsReader rng_file(checkpoint / "rng_state.safetensors");
  util::set_random_state(in_.device, rng_file.read("generator"));
  if (callbacks_.on_message) {
    callbacks_.on_message("resumed from " + checkpoint.string() + " at step " + std::to_string(global_step_));
  }
}

void Trainer::save_final_model() {
  io::SaveOptions save;
  save.config_json = in_.config_json;
  save.copy_tokenizer_from = in_.tokenizer_dir;
  io::save_model_folder(*in_.model, args_.output_dir, save);
  util::write_file_atomic(fs::path(args_.output_dir) / "trainer_state.json", trainer_state_json().dump(2) + "\n");
  util::write_file_atomic(fs::path(args_.output_dir) / "training_args.json", args_.to_json().dump(2) + "\n");
}

void Trainer::begin_run() {
  io::prepare_output_folder(args_.output_dir, args_.overwrite_output_dir && args_.resume_from_checkpoint.empty(),
                            callbacks_.on_message);
  g_stop_signal.store(0);
  memory::start_tracking(in_.device);
  torch::manual_seed(static_cast<std::uint64_t>(args_.seed));  // HF set_seed: dropout draws start here
  if (!args_.resume_from_checkpoint.empty()) {
    resume(resolve_checkpoint(args_.resume_from_checkpoint, args_.output_dir));
  }
  in_.model->train();
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
  loss_since_log_ += outcome.loss;
  steps_since_log_ += 1;
  total_loss_ += outcome.loss;
  last_grad_norm_ = outcome.grad_norm;
  tokens_since_log_ += outcome.tokens;
  train_tokens_ += outcome.tokens;
  if (callbacks_.on_step) callbacks_.on_step(global_step_, max_steps_);
}

bool Trainer::due(IntervalStrategy strategy, std::int64_t every, bool end_of_epoch) const {
  return (strategy == IntervalStrategy::steps && global_step_ % every == 0) ||
         (strategy == IntervalStrategy::epoch && end_of_epoch);
}

void Trainer::log_training(double epoch_value) {
  const double seconds = seconds_since(log_start_);
  const auto mem = memory::read_memory(in_.device);
  nlohmann::ordered_json entry;
  entry["loss"] = loss_since_log_ / static_cast<double>(std::max<std::int64_t>(1, steps_since_log_));
  entry["grad_norm"] = last_grad_norm_;
  entry["learning_rate"] = schedule_.lr(global_step_);
  entry["epoch"] = epoch_value;
  entry["step"] = global_step_;
  entry["tokens_per_second"] = seconds > 0 ? static_cast<double>(tokens_since_log_) / seconds : 0.0;
  if (in_.predicted_peak_bytes) entry["predicted_peak_bytes"] = *in_.predicted_peak_bytes;
  entry["peak_memory_bytes"] = mem.peak_bytes;
  if (oom_splits_since_log_ > 0) entry["oom_splits"] = oom_splits_since_log_;
  oom_splits_since_log_ = 0;
  if (in_.device.is_cuda()) {
    entry["peak_reserved_bytes"] = mem.peak_reserved_bytes;
    entry["alloc_retries"] = mem.alloc_retries;
    entry["ooms"] = mem.ooms;
  }
  log(entry);
  loss_since_log_ = 0.0;
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
    auto entry = evaluate();
    if (entry.is_null()) return;
    const double seconds = entry["eval_runtime"].get<double>();
    entry["epoch"] = epoch_value;
    entry["step"] = global_step_;
    log(entry);
    // Evaluation time is not training time: tokens_per_second of the next log leaves it out.
    log_start_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
  if (due(args_.save_strategy, save_steps_, end_of_epoch)) save_checkpoint(util::random_state(in_.device));
}

// One epoch from step_in_epoch_ on, until its end or max_steps. False when a stop request ended it (a checkpoint
// of the last completed step is saved).
bool Trainer::run_epoch(const std::vector<std::size_t>& lengths, const data::SamplerOptions& sampler) {
  const auto order = data::epoch_order(lengths, sampler, static_cast<std::uint64_t>(epoch_));
  auto steps = data::plan_steps(order, static_cast<std::size_t>(args_.per_device_train_batch_size),
                                static_cast<std::size_t>(args_.gradient_accumulation_steps));
  while (step_in_epoch_ < static_cast<std::int64_t>(steps.size()) && global_step_ < max_steps_) {
    if (g_stop_signal.load() != 0) {  // a stop request between steps (during evaluation or a save)
      if (saved_step_ != global_step_) save_checkpoint(util::random_state(in_.device));
      return false;
    }
    // The random state at the start of the step: an interrupted step is redone from it on resume.
    const auto step_rng = util::random_state(in_.device);
    const auto outcome = run_step(steps[static_cast<std::size_t>(step_in_epoch_)]);
    if (outcome.interrupted) {
      optimizer_->zero_grad();
      util::set_random_state(in_.device, step_rng);
      save_checkpoint(step_rng);
      return false;
    }
    if (!std::isfinite(outcome.loss) || !std::isfinite(outcome.grad_norm)) {
      stop_on_non_finite(global_step_ + 1, outcome.loss, outcome.grad_norm, *in_.model);
    }
    record_step(outcome);
    if (oom_steps_in_a_row_ >= 2 && replan_after_repeated_oom()) {
      // The epoch order does not depend on the micro-batch size, so the remaining steps keep their examples.
      steps = data::plan_steps(order, static_cast<std::size_t>(args_.per_device_train_batch_size),
                               static_cast<std::size_t>(args_.gradient_accumulation_steps));
    }
    const bool end_of_epoch = step_in_epoch_ == static_cast<std::int64_t>(steps.size());
    const double epoch_value =
        static_cast<double>(epoch_) + static_cast<double>(step_in_epoch_) / static_cast<double>(steps.size());
    after_step(end_of_epoch, epoch_value);
  }
  if (step_in_epoch_ >= static_cast<std::int64_t>(steps.size())) {
    epoch_ += 1;
    step_in_epoch_ = 0;
  }
  return true;
}

TrainResult Trainer::finish_run() {
  nlohmann::ordered_json summary;
  summary["epoch"] = static_cast<double>(global_step_) / static_cast<double>(steps_per_epoch_);
  summary["step"] = global_step_;
  summary["train_runtime"] = train_seconds_;
  summary["train_samples_per_second"] = static_cast<double>(train_samples_) / std::max(train_seconds_, 1e-9);
  summary["train_steps_per_second"] = static_cast<double>(global_step_) / std::max(train_seconds_, 1e-9);
  summary["train_tokens_per_second"] = static_cast<double>(train_tokens_) / std::max(train_seconds_, 1e-9);
  summary["total_flos"] = 0;
  summary["train_loss"] = global_step_ ? total_loss_ / static_cast<double>(global_step_) : 0.0;
  log(summary);
  save_final_model();
  TrainResult result;
  result.global_step = global_step_;
  result.metrics = summary;
  return result;
}

TrainResult Trainer::train() {
  begin_run();
  const auto lengths = data::input_lengths(in_.train_examples);
  data::SamplerOptions sampler;
  sampler.seed = static_cast<std::uint64_t>(args_.data_seed.value_or(args_.seed));
  sampler.group_by_length = args_.group_by_length;
  sampler.examples_per_step =
      static_cast<std::size_t>(args_.per_device_train_batch_size * args_.gradient_accumulation_steps);
  const auto run_start = Clock::now();
  try {
    while (global_step_ < max_steps_) {
      if (!run_epoch(lengths, sampler)) {
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
