// Implements include/fitsum/train/run_results.h.
#include "fitsum/train/run_results.h"

#include <cctype>
#include <cstdio>
#include <sstream>

#include "fitsum/util/files.h"

namespace fitsum::train {

namespace fs = std::filesystem;

namespace {

std::string number_text(const nlohmann::ordered_json& value) {
  if (!value.is_number_float()) return value.is_string() ? value.get<std::string>() : value.dump();
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", value.get<double>());
  return text;
}

bool is_timing(const std::string& key) {
  for (const char* part : {"runtime", "per_second", "epoch", "step", "samples", "total_flos"}) {
    if (key.find(part) != std::string::npos) return true;
  }
  return false;
}

// The metrics of an evaluation as "- Loss: 1.2345" lines, timings left out (HF's model card does the same).
std::string metric_lines(const nlohmann::ordered_json& metrics, const std::string& prefix) {
  std::string out;
  for (const auto& item : metrics.items()) {
    if (item.key().rfind(prefix, 0) != 0 || is_timing(item.key())) continue;
    out += "- " + metric_display_name(item.key().substr(prefix.size())) + ": " + number_text(item.value()) + "\n";
  }
  return out;
}

// HF's "Training results" table (modelcard.parse_log_history): one row per evaluation during training, with the
// training loss logged last before it. The entries after the run's summary (train_runtime) are left out: do_eval's
// final evaluation is reported above the table, not as another row (at the step of the last evaluation it would
// repeat that row).
std::string results_table(const nlohmann::ordered_json& log_history) {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
  std::string training_loss = "No log";
  for (const auto& entry : log_history) {
    if (entry.contains("train_runtime")) break;
    if (entry.contains("loss")) training_loss = number_text(entry["loss"]);
    if (!entry.contains("eval_loss") && !entry.contains("eval_rouge1")) continue;
    std::vector<std::string> row = {training_loss, number_text(entry.value("epoch", nlohmann::ordered_json(0.0))),
                                    entry.value("step", nlohmann::ordered_json(0)).dump()};
    std::vector<std::string> names;
    for (const auto& item : entry.items()) {
      if (item.key().rfind("eval_", 0) != 0 || is_timing(item.key())) continue;
      names.push_back(item.key() == "eval_loss" ? "Validation Loss" : metric_display_name(item.key().substr(5)));
      row.push_back(number_text(item.value()));
    }
    if (columns.empty()) columns = names;
    rows.push_back(row);
  }
  if (rows.empty()) return "No evaluation during training.\n";
  std::string out = "| Training Loss | Epoch | Step |";
  std::string rule = "|:---:|:---:|:---:|";
  for (const auto& c : columns) {
    out += " " + c + " |";
    rule += ":---:|";
  }
  out += "\n" + rule + "\n";
  for (const auto& row : rows) {
    out += "|";
    for (const auto& cell : row) out += " " + cell + " |";
    out += "\n";
  }
  return out;
}

}  // namespace

void save_metrics(const fs::path& output_dir, const std::string& split, const nlohmann::ordered_json& metrics) {
  util::write_file_atomic(output_dir / (split + "_results.json"), metrics.dump(4) + "\n");
  const auto all_file = output_dir / "all_results.json";
  nlohmann::ordered_json all = nlohmann::ordered_json::object();
  if (fs::exists(all_file)) all = nlohmann::ordered_json::parse(util::read_json_file(all_file).dump());
  for (const auto& item : metrics.items()) all[item.key()] = item.value();
  util::write_file_atomic(all_file, all.dump(4) + "\n");
}

void write_generated_predictions(const fs::path& file, const std::vector<std::string>& predictions) {
  std::string out;
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    std::string line = predictions[i];
    for (auto& c : line) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    const auto first = line.find_first_not_of(" \t");
    const auto last = line.find_last_not_of(" \t");
    out += first == std::string::npos ? "" : line.substr(first, last - first + 1);
    if (i + 1 < predictions.size()) out += "\n";  // as "\n".join(predictions)
  }
  util::write_file_atomic(file, out);
}

std::string metric_display_name(const std::string& key) {
  std::string out;
  bool start = true;
  for (char c : key) {
    if (c == '_') {
      out += ' ';
      start = true;
      continue;
    }
    out += start ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    start = false;
  }
  return out;
}

std::string model_card_markdown(const ModelCardInputs& in) {
  std::ostringstream card;
  card << "---\nlibrary_name: fitsum\nbase_model: " << in.base_model << "\ntags:\n- summarization\n"
       << "- generated_from_trainer\n---\n\n";
  card << "# " << in.model_name << "\n\n";
  card << "This model is a fine-tuned version of `" << in.base_model << "` on:\n";
  for (const auto& d : in.data) card << "- " << d << "\n";
  if (!in.eval_metrics.empty()) {
    card << "\nIt achieves the following results on the evaluation set:\n" << metric_lines(in.eval_metrics, "eval_");
  }
  if (!in.predict_metrics.empty()) {
    card << "\nOn the test set:\n" << metric_lines(in.predict_metrics, "predict_");
  }
  card << "\n## Training procedure\n\n### Training hyperparameters\n\n"
       << "The following hyperparameters were used during training:\n";
  for (const auto& item : in.hyperparameters.items()) {
    const auto& v = item.value();
    card << "- " << item.key() << ": " << (v.is_string() ? v.get<std::string>() : v.dump()) << "\n";
  }
  card << "\n### Training results\n\n" << results_table(in.log_history);
  card << "\n### Framework versions\n\n- fitsum (C++, LibTorch)\n";
  return card.str();
}

}  // namespace fitsum::train
