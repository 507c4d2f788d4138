// The files run_summarization.py leaves in output_dir besides the model: <split>_results.json and all_results.json
// (Trainer.save_metrics), generated_predictions.txt, and a model card README.md in the spirit of
// Trainer.create_model_card (what was fine-tuned, on which data, with which hyperparameters, to which results).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fitsum::train {

// Writes output_dir/<split>_results.json and merges `metrics` into output_dir/all_results.json (both atomically).
void save_metrics(const std::filesystem::path& output_dir, const std::string& split,
                  const nlohmann::ordered_json& metrics);

// One prediction per line, as run_summarization writes them (stripped; a line break inside one becomes a space, so
// line N is always the prediction of record N).
void write_generated_predictions(const std::filesystem::path& file, const std::vector<std::string>& predictions);

struct ModelCardInputs {
  std::string model_name;         // output_dir's folder name
  std::string base_model;         // model_name_or_path (or config_name)
  std::vector<std::string> data;  // "train_file x.jsonl (N examples)", ...
  nlohmann::ordered_json hyperparameters;
  nlohmann::ordered_json log_history;
  nlohmann::ordered_json eval_metrics;  // the final (or last) evaluation: "It achieves ..."
  nlohmann::ordered_json predict_metrics;
};

// "Rouge1", "Gen Len", "Loss": an eval metric's name as HF's model cards print it.
std::string metric_display_name(const std::string& key);

std::string model_card_markdown(const ModelCardInputs& inputs);

}  // namespace fitsum::train
