// Implements include/fitsum/train/lr_schedule.h (transformers/optimization.py's lambdas).
#include "fitsum/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace fitsum::train {

LrSchedulerType parse_lr_scheduler_type(const std::string& name) {
  if (name == "linear") return LrSchedulerType::linear;
  if (name == "constant") return LrSchedulerType::constant;
  if (name == "constant_with_warmup") return LrSchedulerType::constant_with_warmup;
  if (name == "cosine") return LrSchedulerType::cosine;
  throw std::invalid_argument("lr_scheduler_type '" + name +
                              "' is not supported (choose linear, constant, constant_with_warmup or cosine)");
}

const char* to_string(LrSchedulerType type) {
  switch (type) {
    case LrSchedulerType::linear:
      return "linear";
    case LrSchedulerType::constant:
      return "constant";
    case LrSchedulerType::constant_with_warmup:
      return "constant_with_warmup";
    case LrSchedulerType::cosine:
      return "cosine";
  }
  return "?";
}

double LrSchedule::factor(std::int64_t step) const {
  const double s = static_cast<double>(step);
  const double warmup = static_cast<double>(warmup_steps);
  if (type == LrSchedulerType::constant) return 1.0;
  if (step < warmup_steps) return s / std::max(1.0, warmup);
  switch (type) {
    case LrSchedulerType::constant_with_warmup:
      return 1.0;
    case LrSchedulerType::linear:
      return std::max(0.0, static_cast<double>(total_steps - step) /
                               std::max(1.0, static_cast<double>(total_steps - warmup_steps)));
    case LrSchedulerType::cosine: {
      const double progress = (s - warmup) / std::max(1.0, static_cast<double>(total_steps - warmup_steps));
      return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress)));
    }
    case LrSchedulerType::constant:
      break;
  }
  return 1.0;
}

std::int64_t warmup_steps_for(std::int64_t warmup_steps, double warmup_ratio, std::int64_t total_steps) {
  if (warmup_steps > 0) return warmup_steps;
  return static_cast<std::int64_t>(std::ceil(static_cast<double>(total_steps) * warmup_ratio));
}

}  // namespace fitsum::train
