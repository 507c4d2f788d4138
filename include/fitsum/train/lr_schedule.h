// Learning-rate schedules with the formulas of transformers.get_scheduler (a LambdaLR factor times the base rate).
// As there, the factor for optimizer step k (0-based) is factor(k): with warmup the first update uses lr 0.
#pragma once

#include <cstdint>
#include <string>

namespace fitsum::train {

enum class LrSchedulerType { linear, constant, constant_with_warmup, cosine };

// "linear", "constant", "constant_with_warmup", "cosine"; throws std::invalid_argument naming the field
// (lr_scheduler_type) and listing them.
LrSchedulerType parse_lr_scheduler_type(const std::string& name);
const char* to_string(LrSchedulerType type);

struct LrSchedule {
  LrSchedulerType type = LrSchedulerType::linear;
  double base_lr = 5e-5;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;

  double factor(std::int64_t step) const;
  double lr(std::int64_t step) const { return base_lr * factor(step); }
};

// HF TrainingArguments.get_warmup_steps: warmup_steps when > 0, else ceil(total_steps * warmup_ratio).
std::int64_t warmup_steps_for(std::int64_t warmup_steps, double warmup_ratio, std::int64_t total_steps);

}  // namespace fitsum::train
