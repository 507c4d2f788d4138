// Implements the end of Trainer::train that run_summarization.py adds around HF's Trainer: the train metrics, the
// final evaluation (do_eval) and prediction (do_predict) with their result files, generated_predictions.txt, and
// the model card (train/run_results.h writes the files).
#include <cstdio>

#include "fitsum/optim/optimizers.h"
#include "fitsum/train/lr_schedule.h"
#include "fitsum/train/run_results.h"
#include "fitsum/train/trainer.h"
#include "fitsum/train/training_curves.h"
#include "fitsum/util/files.h"

namespace fitsum::train {

namespace {

// evaluation_metrics() names its keys eval_*; predict() reports the same under predict_* (metric_key_prefix).
nlohmann::ordered_json with_prefix(const nlohmann::ordered_json& metrics, const std::string& prefix) {
  nlohmann::ordered_json out;
  for (const auto& item : metrics.items()) {
    const auto& key = item.key();
    out[key.rfind("eval_", 0) == 0 ? prefix + key.substr(5) : key] = item.value();
  }
  return out;
}

std::string split_description(const char* flag, const std::string& file, std::size_t examples) {
  return std::string(flag) + " `" + file + "` (" + std::to_string(examples) + " examples)";
}

}  // namespace

void Trainer::write_run_results(TrainResult& result) {
  // Every process evaluates its share of the batches (the evaluations are collectives); rank 0 writes.
  const bool evaluates = args_.do_eval && !in_.eval_examples.empty();
  const bool predicts = args_.do_predict && !in_.test_examples.empty();
  const auto evaluation = evaluates ? run_evaluation(in_.eval_examples) : EvaluationResult{};
  const auto prediction = predicts ? run_evaluation(in_.test_examples) : EvaluationResult{};
  if (!main_process_) return;
  const fs::path out(args_.output_dir);
  auto train_metrics = result.metrics;
  train_metrics.erase("step");
  train_metrics["train_samples"] = in_.train_examples.size();
  save_metrics(out, "train", train_metrics);
  const double epoch = result.metrics.value("epoch", 0.0);
  if (evaluates) {
    auto metrics = evaluation_metrics(evaluation, args_.predict_with_generate);
    metrics["epoch"] = epoch;
    metrics["eval_samples"] = in_.eval_examples.size();
    auto entry = metrics;
    entry["step"] = global_step_;
    log(entry);  // HF's evaluate() logs it too
    save_metrics(out, "eval", metrics);
    result.eval_metrics = metrics;
  }
  if (predicts) {
    auto metrics = with_prefix(evaluation_metrics(prediction, args_.predict_with_generate), "predict_");
    metrics["predict_samples"] = in_.test_examples.size();
    save_metrics(out, "predict", metrics);
    result.predict_metrics = metrics;
    if (args_.predict_with_generate) {
      std::vector<std::string> lines;
      for (const auto& p : prediction.predictions) lines.push_back(p.summary);
      write_generated_predictions(out / "generated_predictions.txt", lines);
    }
  }
  ModelCardInputs card;
  card.model_name = fs::absolute(out).lexically_normal().filename().string();
  if (card.model_name.empty()) card.model_name = fs::absolute(out).lexically_normal().parent_path().filename().string();
  card.base_model = in_.model_name_or_path.empty() ? "(random initialisation)" : in_.model_name_or_path;
  card.data.push_back(split_description("train_file", in_.train_file, in_.train_examples.size()));
  if (!in_.eval_examples.empty()) {
    card.data.push_back(split_description("validation_file", in_.validation_file, in_.eval_examples.size()));
  }
  if (!in_.test_examples.empty()) {
    card.data.push_back(split_description("test_file", in_.test_file, in_.test_examples.size()));
  }
  const auto total_batch = examples_per_step();  // HF: per device x accumulation x processes
  card.hyperparameters = {{"learning_rate", args_.learning_rate},
                          {"train_batch_size", args_.per_device_train_batch_size},
                          {"eval_batch_size", args_.per_device_eval_batch_size},
                          {"seed", args_.seed},
                          {"gradient_accumulation_steps", args_.gradient_accumulation_steps},
                          {"total_train_batch_size", total_batch},
                          {"optimizer", optim::to_string(args_.optimizer())},
                          {"weight_decay", args_.weight_decay},
                          {"lr_scheduler_type", to_string(args_.lr_scheduler_type)},
                          {"lr_scheduler_warmup_steps", schedule_.warmup_steps},
                          {"training_steps", max_steps_},
                          {"label_smoothing_factor", args_.label_smoothing_factor},
                          {"gradient_checkpointing", args_.gradient_checkpointing},
                          {"mixed_precision_training", args_.bf16 ? "bf16 autocast" : "no (float32)"}};
  card.log_history = log_history_;
  card.eval_metrics = result.eval_metrics;
  if (card.eval_metrics.empty()) {  // the evaluation of the model saved: the best one's, else the last one
    const bool best = args_.load_best_model_at_end && best_global_step_ && !best_model_checkpoint_.empty();
    for (const auto& entry : log_history_) {
      if (!entry.contains("eval_loss") && !entry.contains("eval_rouge1")) continue;
      if (!best || entry.value("step", std::int64_t{-1}) == *best_global_step_) card.eval_metrics = entry;
    }
  }
  card.predict_metrics = result.predict_metrics;
  util::write_file_atomic(out / "README.md", model_card_markdown(card));
  util::write_file_atomic(out / "training_curves.svg",
                          training_curves_svg(log_history_, "Training curves of " + card.model_name));
}

}  // namespace fitsum::train
