// Implements include/fitsum/io/checkpoint_state.h.
#include "fitsum/io/checkpoint_state.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace fitsum::io {

namespace {

[[noreturn]] void damaged(const std::filesystem::path& file, const std::string& field, const std::string& why) {
  throw std::runtime_error("cannot resume from '" + file.string() + "': field '" + field + "' " + why +
                           "; the file is damaged, resume from another checkpoint");
}

const nlohmann::json& field_of(const nlohmann::json& state, const char* name, const std::filesystem::path& file) {
  const auto it = state.find(name);
  if (it == state.end()) damaged(file, name, "is missing");
  return *it;
}

std::int64_t count(const nlohmann::json& value, const char* name, const std::filesystem::path& file) {
  if (value.is_number_unsigned()) {
    if (value.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      damaged(file, name, "is " + value.dump() + ", past any run's size");
    }
    return static_cast<std::int64_t>(value.get<std::uint64_t>());
  }
  if (!value.is_number_integer()) damaged(file, name, "must be an integer, found " + std::string(value.type_name()));
  const auto v = value.get<std::int64_t>();
  if (v < 0) damaged(file, name, "is " + std::to_string(v) + "; it must not be negative");
  return v;
}

std::int64_t count_field(const nlohmann::json& state, const char* name, const std::filesystem::path& file) {
  return count(field_of(state, name, file), name, file);
}

std::int64_t seed_field(const nlohmann::json& state, const char* name, const std::filesystem::path& file) {
  const auto& value = field_of(state, name, file);
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<std::int64_t>();
  return count(value, name, file);
}

double number_field(const nlohmann::json& state, const char* name, const std::filesystem::path& file) {
  const auto& value = field_of(state, name, file);
  if (!value.is_number()) damaged(file, name, "must be a number, found " + std::string(value.type_name()));
  const auto v = value.get<double>();
  if (!std::isfinite(v)) damaged(file, name, "is not finite");
  return v;
}

}  // namespace

CheckpointPosition parse_checkpoint_position(const nlohmann::json& state, const std::filesystem::path& file) {
  if (!state.is_object()) damaged(file, "(top level)", "must be an object, found " + std::string(state.type_name()));
  CheckpointPosition p;
  p.epoch = count_field(state, "epoch", file);
  p.step_in_epoch = count_field(state, "step_in_epoch", file);
  p.global_step = count_field(state, "global_step", file);
  p.loss_since_log = number_field(state, "loss_since_log", file);
  p.steps_since_log = count_field(state, "steps_since_log", file);
  p.total_loss = number_field(state, "total_loss", file);
  p.last_grad_norm = number_field(state, "last_grad_norm", file);
  if (state.contains("evaluations_without_improvement")) {
    p.evaluations_without_improvement = count_field(state, "evaluations_without_improvement", file);
  }
  p.seed = seed_field(state, "seed", file);
  p.data_seed = state.contains("data_seed") ? seed_field(state, "data_seed", file) : p.seed;
  p.train_examples = count_field(state, "train_examples", file);
  p.examples_per_step = count_field(state, "examples_per_step", file);
  return p;
}

ResumedTrainerState parse_trainer_state(const nlohmann::json& state, const std::filesystem::path& file) {
  if (!state.is_object()) damaged(file, "(top level)", "must be an object, found " + std::string(state.type_name()));
  ResumedTrainerState r;
  const auto& history = field_of(state, "log_history", file);
  if (!history.is_array()) damaged(file, "log_history", "must be an array, found " + std::string(history.type_name()));
  for (const auto& entry : history) {
    if (!entry.is_object()) damaged(file, "log_history", "must hold objects, found " + std::string(entry.type_name()));
  }
  r.log_history = nlohmann::ordered_json::parse(history.dump());
  if (state.contains("best_metric") && !state["best_metric"].is_null()) r.best_metric = number_field(state, "best_metric", file);
  if (state.contains("best_global_step") && !state["best_global_step"].is_null()) {
    r.best_global_step = count_field(state, "best_global_step", file);
  }
  if (state.contains("total_flos") && !state["total_flos"].is_null()) {
    r.total_flos = number_field(state, "total_flos", file);
    if (r.total_flos < 0) damaged(file, "total_flos", "must not be negative");
  }
  if (state.contains("best_model_checkpoint") && !state["best_model_checkpoint"].is_null()) {
    const auto& best = state["best_model_checkpoint"];
    if (!best.is_string()) {
      damaged(file, "best_model_checkpoint", "must be a string, found " + std::string(best.type_name()));
    }
    r.best_model_checkpoint = best.get<std::string>();
  }
  return r;
}

}  // namespace fitsum::io
