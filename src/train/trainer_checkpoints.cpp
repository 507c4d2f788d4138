// Implements the saving side of include/fitsum/train/trainer.h: trainer_state.json (rewritten at every log,
// evaluation and save), checkpoints and their pruning, resuming, and the best model (HF's best_metric,
// best_model_checkpoint, load_best_model_at_end and EarlyStoppingCallback, whose rules are in best_model.h).
#include <algorithm>
#include <sstream>

#include <torch/torch.h>

#include "fitsum/io/adapter.h"
#include "fitsum/io/checkpoint.h"
#include "fitsum/io/checkpoint_folders.h"
#include "fitsum/io/checkpoint_state.h"
#include "fitsum/io/safetensors.h"
#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/model/lora.h"
#include "fitsum/optim/optimizers.h"
#include "fitsum/train/best_model.h"
#include "fitsum/train/distributed.h"
#include "fitsum/train/optimizer_offload.h"
#include "fitsum/train/trainer.h"
#include "fitsum/util/files.h"
#include "fitsum/util/random_state.h"

namespace fitsum::train {

namespace {

// The fine-tuned model folder's generation_config.json travels with every saved model, as HF's save_pretrained
// writes the generation config it loaded: decoding settings a user edited there survive fine-tuning. Null (derive
// it from config.json) when the run started from a config alone.
nlohmann::json source_generation_config(const std::string& model_dir) {
  const fs::path file = fs::path(model_dir) / "generation_config.json";
  std::error_code error;
  if (model_dir.empty() || !fs::is_regular_file(file, error)) return nullptr;
  return util::read_json_file(file);
}

// The model files of a save: with adapters (a LoRA run) the adapter as PEFT saves it and the tokenizer files, else
// the whole model folder.
void save_run_model(const TrainingArguments& args, const TrainerInputs& in, const fs::path& dir) {
  if (args.lora.enabled()) {
    io::save_adapter(*in.model.ptr(), args.lora, dir, {in.model_name_or_path, ""});
    io::copy_tokenizer_files(in.tokenizer_dir, dir);
    return;
  }
  io::SaveOptions save;
  save.config_json = in.config_json;
  save.copy_tokenizer_from = in.tokenizer_dir;
  save.generation_config = source_generation_config(in.model_dir.string());
  io::save_model_folder(*in.model.ptr(), dir, save);
}

// What a checkpoint's adapter was made with against this run's: the first field that differs, or "".
std::string lora_difference(model::Seq2SeqLMImpl& model, const model::LoraConfig& saved, const model::LoraConfig& run) {
  const auto number = [](double v) {
    std::ostringstream out;
    out << v;
    return out.str();
  };
  if (saved.r != run.r) return "r " + std::to_string(saved.r) + ", this run's " + std::to_string(run.r);
  if (saved.lora_alpha != run.lora_alpha) {
    return "lora_alpha " + number(saved.lora_alpha) + ", this run's " + number(run.lora_alpha);
  }
  if (saved.use_rslora != run.use_rslora) return std::string("use_rslora ") + (saved.use_rslora ? "true" : "false");
  if (saved.lora_dropout != run.lora_dropout) {
    return "lora_dropout " + number(saved.lora_dropout) + ", this run's " + number(run.lora_dropout);
  }
  if (saved.bias != run.bias) {
    return std::string("bias ") + model::lora_bias_name(saved.bias) + ", this run's " + model::lora_bias_name(run.bias);
  }
  if (saved.modules_to_save != run.modules_to_save) return "other modules_to_save";
  if (model::lora_target_names(model, saved) != model::lora_target_names(model, run)) return "other target_modules";
  return "";
}

// A resume's weights: the adapter of a LoRA run (the frozen base is the run's, loaded from its model), else the
// whole model; each checked against the run before a tensor is copied.
void restore_weights(const fs::path& checkpoint, const TrainingArguments& args, model::Seq2SeqLMImpl& model) {
  const auto refuse = [&](const std::string& why, const std::string& hint) {
    throw std::invalid_argument("cannot resume from checkpoint '" + checkpoint.string() + "': " + why + "; " + hint);
  };
  const bool adapter = io::is_adapter_folder(checkpoint);
  if (args.lora.enabled() != adapter) {
    refuse(adapter ? "it holds a LoRA adapter (adapter_config.json), this run trains the whole model"
                   : "it holds a whole model, this run trains LoRA adapters",
           "resume with the settings the checkpoint was made with, or start a new run");
  }
  if (adapter) {
    const auto folder = io::open_adapter_folder(checkpoint);
    const auto difference = lora_difference(model, folder.config, args.lora);
    if (!difference.empty()) {
      refuse("its adapter has " + difference, "resume with the LoRA settings of its adapter_config.json");
    }
    io::load_adapter_weights(model, folder);
    return;
  }
  auto folder = io::open_model_folder(checkpoint);
  // Another model's checkpoint is named as such, before its tensors are compared one by one with this run's.
  if (const auto d = model::architecture_difference(folder.config, model.config())) {
    const auto what = d->field == "model_type" ? "it is a " + d->first + " model, this run is " + d->second
                                               : "its " + d->field + " is " + d->first + ", this run's is " + d->second;
    refuse(what,
           "resume from a checkpoint of this run's model, or start a new run from its weights with "
           "--model_name_or_path " +
               checkpoint.string() + " (without --resume_from_checkpoint)");
  }
  io::load_weights(model, folder);
}

}  // namespace

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
  const auto refuse = [&](const std::string& why, const std::string& hint) {
    throw std::runtime_error("resume_from_checkpoint '" + resume_from_checkpoint + "' " + why + "; " + hint);
  };
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    refuse(fs::exists(dir, error) ? "is not a folder" : "does not exist",
           "give a checkpoint-N folder, or 'latest' for the newest in output_dir");
  }
  if (util::folder_has_file(dir, "fitsum_state.json")) return dir;
  // The run's folder instead of one of its checkpoints (HF resumes only from a checkpoint folder too).
  const auto inside = io::list_checkpoints(dir);
  if (!inside.empty()) {
    std::string names;
    for (std::size_t i = 0; i < inside.size() && i < 8; ++i) names += (i ? ", " : "") + inside[i].filename().string();
    if (inside.size() > 8) names += " and " + std::to_string(inside.size() - 8) + " more";
    refuse("is a run's output folder, not a checkpoint; it holds " + names,
           "resume from one of them (--resume_from_checkpoint " + inside.back().string() +
               "), or with --resume_from_checkpoint latest from the newest in output_dir");
  }
  if (util::folder_has_file(dir, "trainer_state.json") && util::folder_has_file(dir, "config.json")) {
    refuse("is not a checkpoint of fitsum (it has no fitsum_state.json, the data position a resume continues from)",
           "start a new run from its weights with --model_name_or_path " + resume_from_checkpoint);
  }
  refuse("is not a checkpoint folder (it has no fitsum_state.json and holds no checkpoint-N folder)",
         "give a checkpoint-N folder, or 'latest' for the newest in output_dir");
  return dir;
}

void Trainer::write_trainer_state() const {
  if (!main_process_) return;
  util::write_file_atomic(fs::path(args_.output_dir) / "trainer_state.json", trainer_state_json().dump(2) + "\n");
}

nlohmann::ordered_json Trainer::trainer_state_json() const {
  nlohmann::ordered_json s;
  s["best_global_step"] = best_global_step_ ? nlohmann::ordered_json(*best_global_step_) : nullptr;
  s["best_metric"] = best_metric_ ? nlohmann::ordered_json(*best_metric_) : nullptr;
  s["best_model_checkpoint"] =
      best_model_checkpoint_.empty() ? nullptr : nlohmann::ordered_json(best_model_checkpoint_);
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
  s["total_flos"] = total_flos_;
  s["train_batch_size"] = args_.per_device_train_batch_size;
  s["trial_name"] = nullptr;
  s["trial_params"] = nullptr;
  return s;
}

void Trainer::save_checkpoint(const torch::Tensor& rng) {
  read_step_statistics();  // the checkpoint holds the run's loss sums; a diverged run saves nothing
  if (!owner_.empty()) {
    save_sharded_checkpoint(rng);
    return;
  }
  if (!main_process_) {  // rank 0 writes the one checkpoint of the job (every process holds the same state)
    saved_step_ = global_step_;
    return;
  }
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
  prune_checkpoints();
  write_trainer_state();
}

// save_total_limit: the oldest checkpoints go, the best one stays (HF's _rotate_checkpoints).
// A checkpoint the run reads (model_name_or_path out/checkpoint-2: its tokenizer files are copied into every save)
// is not one the limit counts or removes.
void Trainer::prune_checkpoints() {
  if (!args_.save_total_limit) return;
  const auto best = best_model_checkpoint_.empty() ? fs::path() : fs::path(best_model_checkpoint_);
  auto checkpoints = io::list_checkpoints(args_.output_dir);
  for (const auto& [read, input] : io::checkpoints_holding(checkpoints, run_inputs())) {
    checkpoints.erase(std::find(checkpoints.begin(), checkpoints.end(), read));
  }
  for (const auto& folder : checkpoints_to_remove(checkpoints, best, *args_.save_total_limit)) {
    io::remove_checkpoint(folder);
    if (callbacks_.on_message) callbacks_.on_message("removed " + folder.string() + " (save_total_limit)");
  }
}

std::vector<io::RunInput> Trainer::run_inputs() const {
  return {{"the model", in_.model_name_or_path},
          {"the tokenizer", in_.tokenizer_dir},
          {"train_file", in_.train_file},
          {"validation_file", in_.validation_file},
          {"test_file", in_.test_file}};
}

void Trainer::warn(const std::string& message) const {
  if (callbacks_.on_warning) {
    callbacks_.on_warning(message);
  } else if (callbacks_.on_message) {
    callbacks_.on_message("warning: " + message);
  }
}

void Trainer::record_evaluation(const nlohmann::ordered_json& metrics) {
  const auto key = args_.best_metric_key();
  if (key.empty()) return;
  const auto found = metrics.find(key);
  if (found == metrics.end() || !found->is_number()) {
    std::string available;
    for (const auto& item : metrics.items()) available += (available.empty() ? "" : ", ") + item.key();
    throw std::invalid_argument("metric_for_best_model is '" + key +
                                "', which the evaluation does not report (it has " + available +
                                "); ROUGE and gen_len need predict_with_generate");
  }
  const double value = found->get<double>();
  const bool greater = args_.best_metric_greater_is_better();
  // EarlyStoppingCallback.on_evaluate runs before the trainer takes the new best: it compares with the old one.
  if (args_.early_stopping_patience) {
    if (improves_for_early_stopping(value, best_metric_, greater, args_.early_stopping_threshold)) {
      evaluations_without_improvement_ = 0;
    } else {
      evaluations_without_improvement_ += 1;
    }
    if (evaluations_without_improvement_ >= *args_.early_stopping_patience) {
      stop_early_ = true;
      if (callbacks_.on_message) {
        callbacks_.on_message("early stopping at step " + std::to_string(global_step_) + ": " + key + " has not " +
                              "improved for " + std::to_string(evaluations_without_improvement_) + " evaluations");
      }
    }
  }
  if (is_new_best(value, best_metric_, greater)) {
    best_metric_ = value;
    best_global_step_ = global_step_;
    best_model_checkpoint_ = (fs::path(args_.output_dir) / ("checkpoint-" + std::to_string(global_step_))).string();
  }
}

void Trainer::write_checkpoint_files(const fs::path& temp_dir, const torch::Tensor& rng) {
  save_run_model(args_, in_, temp_dir);
  write_optimizer_state(temp_dir);
  io::write_safetensors(temp_dir / "rng_state.safetensors", {{"generator", rng}}, {{"device", in_.device.str()}});
  nlohmann::ordered_json scheduler = {{"lr_scheduler_type", to_string(schedule_.type)},
                                      {"last_epoch", global_step_},
                                      {"warmup_steps", schedule_.warmup_steps},
                                      {"total_steps", schedule_.total_steps},
                                      {"learning_rate", schedule_.lr(global_step_)}};
  util::write_file_atomic(temp_dir / "scheduler.json", scheduler.dump(2) + "\n");
  util::write_file_atomic(temp_dir / "trainer_state.json", trainer_state_json().dump(2) + "\n");
  util::write_file_atomic(temp_dir / "training_args.json", args_.to_json().dump(2) + "\n");
  nlohmann::ordered_json position = {{"epoch", epoch_},
                                     {"step_in_epoch", step_in_epoch_},
                                     {"global_step", global_step_},
                                     {"loss_since_log", loss_since_log_},
                                     {"steps_since_log", steps_since_log_},
                                     {"total_loss", total_loss_},
                                     {"last_grad_norm", last_grad_norm_},
                                     {"evaluations_without_improvement", evaluations_without_improvement_},
                                     {"seed", args_.seed},
                                     {"data_seed", args_.data_seed.value_or(args_.seed)},
                                     {"train_examples", in_.train_examples.size()},
                                     {"examples_per_step", examples_per_step()}};
  util::write_file_atomic(temp_dir / "fitsum_state.json", position.dump(2) + "\n");
}

std::string Trainer::optimizer_file_name() const {
  return owner_.empty() ? "optimizer.safetensors" : io::optimizer_shard_name(group_->rank(), world_size_);
}

void Trainer::write_optimizer_state(const fs::path& dir) const {
  io::write_safetensors(dir / optimizer_file_name(), optim::export_optimizer_state(*optimizer_, optimizer_parameters()),
                        {{"format", "fitsum-optimizer"},
                         {"optim", optim::to_string(args_.optimizer())},
                         {"zero_stage", std::to_string(owner_.empty() ? 0 : args_.zero_stage)}});
}

namespace {

// A checkpoint saved with another optimizer holds other state tensors: that is named, not the first missing tensor.
void check_saved_optimizer(const io::SafetensorsReader& reader, const fs::path& checkpoint,
                           optim::OptimizerType current) {
  const auto saved = reader.metadata().find("optim");
  if (saved == reader.metadata().end()) return;  // written before the name was stored: the tensors are compared
  optim::OptimizerType type;
  try {
    type = optim::parse_optimizer_type(saved->second);
  } catch (const std::invalid_argument&) {
    throw std::runtime_error("cannot resume from checkpoint '" + checkpoint.string() +
                             "': " + reader.path().filename().string() + " names the optimizer '" + saved->second +
                             "', which fitsum does not know; the file is damaged, resume from another checkpoint");
  }
  if (type == current) return;
  throw std::invalid_argument("cannot resume from checkpoint '" + checkpoint.string() + "': its optimizer state is " +
                              optim::to_string(type) + "'s, this run's optimizer is " + optim::to_string(current) +
                              "; resume with --optim " + optim::to_string(type) +
                              ", or start a new run (fresh optimizer state) from its weights with "
                              "--model_name_or_path " +
                              checkpoint.string() + " (without --resume_from_checkpoint)");
}

}  // namespace

// The state of this process's parameters, from the one file or from every shard (entries are "<parameter>.<state>"
// by name, so a checkpoint of N processes resumes on M, sharded or not).
void Trainer::read_optimizer_state(const fs::path& checkpoint) {
  const auto owned = owned_parameter_names();
  std::set<std::string> names;
  for (const auto& [name, p] : parameters_) {
    if (!owned || owned->count(name)) names.insert(name);
  }
  std::map<std::string, torch::Tensor> state;
  for (const auto& file : io::optimizer_state_files(checkpoint)) {
    io::SafetensorsReader reader(file);
    check_saved_optimizer(reader, checkpoint, args_.optimizer());
    for (const auto& e : reader.entries()) {
      const auto dot = e.name.rfind('.');
      if (dot != std::string::npos && names.count(e.name.substr(0, dot)))
        state[e.name] = reader.read(e.name).to(offload_ ? torch::Device(torch::kCPU) : in_.device);
    }
  }
  memory::HostMemoryScope host(offload_ != nullptr);  // an offloaded optimizer's state is the host's
  optim::import_optimizer_state(*optimizer_, optimizer_parameters(), state);
}

const std::vector<std::pair<std::string, torch::Tensor>>& Trainer::optimizer_parameters() const {
  return offload_ ? offload_->host_parameters() : parameters_;
}

// The job's one checkpoint when each process holds part of the optimizer state: rank 0 makes the temporary folder
// and tells the others where it is; every process writes its shard (rank 0 also the rest); only when all succeeded
// does rank 0 rename it into place. A failure anywhere leaves no checkpoint folder and fails every process.
void Trainer::save_sharded_checkpoint(const torch::Tensor& rng) {
  const fs::path output_dir(args_.output_dir);
  fs::path temp_dir;
  std::string error;
  if (main_process_) {
    try {
      temp_dir = io::begin_checkpoint(output_dir, global_step_);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  temp_dir = group_->broadcast_string(temp_dir.string(), 0);
  if (temp_dir.empty()) {
    throw std::runtime_error(main_process_ ? error
                                           : "rank 0 could not start checkpoint " + std::to_string(global_step_));
  }
  try {
    if (main_process_) {
      write_checkpoint_files(temp_dir, rng);
    } else {
      write_optimizer_state(temp_dir);
    }
  } catch (const std::exception& e) {
    error = "writing " + optimizer_file_name() + " of checkpoint " + std::to_string(global_step_) + " into '" +
            temp_dir.string() + "' (output_dir must be on a file system every process sees): " + e.what();
  }
  if (group_->any(!error.empty())) {
    if (main_process_) {
      std::error_code ignored;
      fs::remove_all(temp_dir, ignored);
    }
    throw std::runtime_error(!error.empty() ? error
                                            : "another process failed to write its part of checkpoint " +
                                                  std::to_string(global_step_) + "; nothing was saved");
  }
  saved_step_ = global_step_;
  if (!main_process_) return;
  const auto final_dir = io::commit_checkpoint(temp_dir, global_step_);
  if (callbacks_.on_message) callbacks_.on_message("saved " + final_dir.string());
  prune_checkpoints();
  write_trainer_state();
}

void Trainer::resume(const fs::path& checkpoint) {
  restore_weights(checkpoint, args_, *in_.model);
  in_.model->to(in_.device);

  const auto position_file = checkpoint / "fitsum_state.json";
  const auto position = io::parse_checkpoint_position(util::read_json_file(position_file), position_file);
  const auto per_step = examples_per_step();
  const auto data_seed = args_.data_seed.value_or(args_.seed);
  const auto examples = static_cast<std::int64_t>(in_.train_examples.size());
  if (position.seed != args_.seed || position.data_seed != data_seed || position.train_examples != examples ||
      position.examples_per_step != per_step) {
    throw std::invalid_argument("cannot resume exactly from '" + checkpoint.string() + "': it was made with seed " +
                                std::to_string(position.seed) + ", " + std::to_string(position.train_examples) +
                                " training examples and " + std::to_string(position.examples_per_step) +
                                " examples per optimizer step; now they are " + std::to_string(args_.seed) + ", " +
                                std::to_string(examples) + " and " + std::to_string(per_step));
  }
  io::check_checkpoint_position(position_file, position.epoch, position.step_in_epoch, position.global_step,
                                steps_per_epoch_);
  epoch_ = position.epoch;
  step_in_epoch_ = position.step_in_epoch;
  global_step_ = position.global_step;
  loss_since_log_ = position.loss_since_log;
  steps_since_log_ = position.steps_since_log;
  total_loss_ = position.total_loss;
  last_grad_norm_ = position.last_grad_norm;
  evaluations_without_improvement_ = position.evaluations_without_improvement;
  const auto state_file = checkpoint / "trainer_state.json";
  auto state = io::parse_trainer_state(util::read_json_file(state_file), state_file);
  log_history_ = std::move(state.log_history);
  best_metric_ = state.best_metric;
  total_flos_ = state.total_flos;
  if (state.best_global_step) best_global_step_ = *state.best_global_step;
  if (!state.best_model_checkpoint.empty()) best_model_checkpoint_ = state.best_model_checkpoint;

  read_optimizer_state(checkpoint);
  io::SafetensorsReader rng_file(checkpoint / "rng_state.safetensors");
  util::set_random_state(in_.device, rng_file.read("generator"));
  if (callbacks_.on_message) {
    callbacks_.on_message("resumed from " + checkpoint.string() + " at step " + std::to_string(global_step_));
  }
}

// load_best_model_at_end: the weights of the best checkpoint become the model saved in output_dir. Only rank 0
// judged the evaluations; the other processes take its weights (the final evaluation is sharded over all).
void Trainer::load_best_model() {
  if (!args_.load_best_model_at_end) return;
  if (main_process_ && !best_model_checkpoint_.empty()) {
    const char* saved = args_.lora.enabled() ? io::kAdapterWeightsName : "model.safetensors";
    if (fs::exists(fs::path(best_model_checkpoint_) / saved)) {
      std::ostringstream score;
      score << *best_metric_;
      if (callbacks_.on_message) {
        callbacks_.on_message("loading best model from " + best_model_checkpoint_ + " (score: " + score.str() + ")");
      }
      restore_weights(best_model_checkpoint_, args_, *in_.model);
      in_.model->to(in_.device);
    } else if (callbacks_.on_message) {
      callbacks_.on_message("load_best_model_at_end: " + best_model_checkpoint_ +
                            " was not saved; the final model is the last step's");
    }
  }
  if (world_size_ > 1) share_rank_zero_weights();
}

void Trainer::save_final_model() {
  if (!main_process_) return;
  save_run_model(args_, in_, args_.output_dir);
  write_trainer_state();
  util::write_file_atomic(fs::path(args_.output_dir) / "training_args.json", args_.to_json().dump(2) + "\n");
}

}  // namespace fitsum::train
