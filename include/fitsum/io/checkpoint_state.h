// The JSON files of a checkpoint folder that a resume reads back: fitsum_state.json (where the run stands and what
// it was made with) and trainer_state.json (HF's: the log history and the best metric so far). Every field is checked
// for presence, type and range as it is read: a damaged or hand-edited file is a std::runtime_error naming the file
// and the field, never a raw JSON library error or a position that indexes past the data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace fitsum::io {

struct CheckpointPosition {
  std::int64_t epoch = 0;
  std::int64_t step_in_epoch = 0;
  std::int64_t global_step = 0;
  double loss_since_log = 0.0;  // summed step losses since the last log
  std::int64_t steps_since_log = 0;
  double total_loss = 0.0;
  double last_grad_norm = 0.0;
  std::int64_t evaluations_without_improvement = 0;  // early stopping's patience counter (0 when absent)
  std::int64_t seed = 0;
  std::int64_t data_seed = 0;  // the seed when absent
  std::int64_t train_examples = 0;
  std::int64_t examples_per_step = 0;
};

// fitsum_state.json. Counts and steps must be non-negative integers, losses finite numbers.
CheckpointPosition parse_checkpoint_position(const nlohmann::json& state, const std::filesystem::path& file);

struct ResumedTrainerState {
  nlohmann::ordered_json log_history = nlohmann::ordered_json::array();
  std::optional<double> best_metric;
  std::optional<std::int64_t> best_global_step;
  std::string best_model_checkpoint;  // empty when none
  double total_flos = 0.0;             // HF's floating-point operations so far (0 when absent)
};

// trainer_state.json: log_history must be an array of objects; the best-model fields and total_flos are optional
// (HF writes null for the first).
ResumedTrainerState parse_trainer_state(const nlohmann::json& state, const std::filesystem::path& file);

}  // namespace fitsum::io
