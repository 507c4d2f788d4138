// A run under a memory budget, planned and applied: the one path from TrainingArguments to the plan they train with,
// taken by `fitsum train --max_memory` (prepare_training) and `fitsum bench train --max_memory`. What differs between
// them is data, not code: the worst batch (the data's, or the benchmark's lengths), the knobs the user fixed, the
// run's evaluations and whether the processes of a job share rank 0's calibration probe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "fitsum/memory/fit.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/train/distributed.h"
#include "fitsum/train/training_arguments.h"
#include "fitsum/train/training_job.h"
#include "fitsum/util/runtime.h"

namespace fitsum::train {

struct BudgetPlanOptions {
  std::uint64_t budget = 0;  // bytes the run may hold (memory::resolve_memory_budget)
  memory::BatchShape worst;  // the longest source and target a micro-batch holds
  FixedKnobs fixed;          // the knobs that stay as `args` has them; the planner chooses the others
  int world_size = 1;        // the processes the plan is for, each planned alike
  // The run's evaluations (evaluation_load), when it evaluates: their batch may set the peak.
  std::optional<memory::EvaluationLoad> evaluation;
  // Where given, every process of the job plans with rank 0's calibration probe (on one machine the probes would
  // run at once and measure each other; on equal devices they would measure the same).
  std::shared_ptr<ProcessGroup> share_calibration;
};

// Moves `model` to the runtime's device, builds the planner's request (make_fit_request, under the runtime's CUDA
// allocator settings), runs memory::fit_training, and throws memory::PlanDoesNotFit when no plan fits. Otherwise
// reports the planner's warnings (an optimizer other than the preferred one, a smaller eval batch), applies the
// chosen knobs to `args` (apply_plan) and caps the device's memory at the budget (memory::apply_memory_budget).
memory::FitResult plan_and_apply(model::Seq2SeqLMImpl& model, TrainingArguments& args,
                                 const BudgetPlanOptions& options, const util::Runtime& runtime, const Report& report);

}  // namespace fitsum::train
