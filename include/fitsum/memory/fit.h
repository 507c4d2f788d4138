// fitsum's promise as one library call: given a model, the shape of the data and what the user fixed, find the
// fastest training configuration that fits a memory budget (memory/planner.h does the predicting), or say why none
// does and what would. `fitsum train --max_memory`, `fitsum plan` and `fitsum bench train --max_memory` call it and
// only format its result.
//
// The steps, in order:
//   1. Static memory first, before any probe: when the user fixed the optimizer and its weights, gradients and state
//      alone exceed the budget, the answer comes in milliseconds (naming the optimizer that would fit, if any).
//   2. The calibration probe on the model (memory::calibrate), under the runtime the run will use.
//   3. Every candidate that keeps the effective batch and the fixed knobs, predicted and ranked (memory::choose_plan).
//   4. When none fits, the same with every knob free: "a plan that fits", or the smallest budget anything needs.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "fitsum/memory/planner.h"

namespace fitsum::memory {

// What the caller fixes; every knob left empty the planner chooses.
struct FitRequest {
  std::uint64_t budget = 0;          // bytes the run may hold at its peak (weights included)
  BatchShape worst;                  // the longest source and target after truncation; its batch is ignored
  std::int64_t effective_batch = 8;  // per_device_train_batch_size x gradient_accumulation_steps, always kept
  std::optional<std::int64_t> micro_batch;
  std::optional<optim::OptimizerType> optimizer;
  std::optional<std::int64_t> checkpointed_layers;  // per stack; >= the depth means all
  bool bf16 = false;
  double label_smoothing = 0.0;
  double margin = kPlanMargin;
};

enum class FitStatus {
  fits,                // `chosen` is the fastest candidate under the budget
  settings_too_large,  // what the user fixed cannot fit; `alternative` fits when the planner may choose
  nothing_fits,        // not even the cheapest candidate fits; `minimum_budget` says what it needs
};

struct FitResult {
  FitStatus status = FitStatus::nothing_fits;
  std::optional<Calibration> calibration;  // absent when step 1 refused without a probe
  Plan plan;                               // the candidates under the request (empty without a probe)
  std::optional<Candidate> chosen;         // status == fits
  std::optional<Candidate> alternative;    // status == settings_too_large: the planner's own choice that fits
  std::uint64_t minimum_budget = 0;        // the smallest budget under which the request's best candidate fits
  std::uint64_t budget = 0;                // the request's budget
  BatchShape worst;                        // the request's worst batch (lengths planned for)
  std::int64_t layers = 0;                 // the deeper stack's layer count (checkpointing labels)
  std::string explanation;                 // why this plan, or why none, in one paragraph
};

// Runs the steps above on `model` (on its device). The model's weights stay as they are; gradients are left
// allocated and zero; the random stream is unchanged.
FitResult fit_training(model::Seq2SeqLMImpl& model, const FitRequest& request);

// Thrown by callers that cannot go on without a plan (fitsum train): carries the result for the message and the
// table; the CLI exits with status 3.
class PlanDoesNotFit : public std::runtime_error {
 public:
  explicit PlanDoesNotFit(FitResult result);
  const FitResult& result() const { return result_; }

 private:
  FitResult result_;
};

// "--per_device_train_batch_size 4 --gradient_accumulation_steps 2 --gradient_checkpointing --optim adafactor":
// the TrainingArguments that select `knobs`, in their command-line spelling.
std::string plan_arguments(const PlanKnobs& knobs, std::int64_t layers);

}  // namespace fitsum::memory
