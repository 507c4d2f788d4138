// The memory planner: predicted peaks against peaks measured by training (a subset of the grid; the full grid is
// tests/slow/planner_grid_test.cpp), the chooser's rules on a synthetic calibration, and out-of-memory recovery in
// the trainer (a budget lowered mid-run, an error injected into a backward: the step is split or redone, covers the
// same examples and training finishes).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/memory/planner.h"
#include "fitsum/memory/tracking_allocator.h"
#include "planner_grid.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

TEST(Planner, PredictedPeakWithinTenPercentOfMeasuredOnASubsetOfTheGrid) {
  std::vector<GridCell> cells;
  run_grid(grid_model_small(), {1, 4}, {128}, 32, {false, true},
           {optim::OptimizerType::adamw_torch, optim::OptimizerType::adafactor}, cells);
  print_grid(cells);
  ASSERT_EQ(cells.size(), 8u);
  for (const auto& c : cells) {
    EXPECT_LE(std::abs(c.error()), 0.10) << c.model << " micro-batch " << c.knobs.micro_batch << " checkpointing "
                                         << c.knobs.checkpointed_layers << " " << optim::to_string(c.knobs.optimizer)
                                         << ": predicted " << c.predicted << ", measured " << c.measured;
  }
}

// A calibration with round numbers: activations 1 MB + 1000 B per source token per row without checkpointing,
// 1 MB + 200 B with it; checkpointing costs 30% more time per token.
memory::Calibration synthetic_calibration() {
  memory::Calibration c;
  c.counts.trainable = 1'000'000;
  c.counts.matrix_elements = 990'000;
  c.counts.matrix_rows_plus_cols = 10'000;
  c.counts.vector_elements = 10'000;
  c.weight_bytes = 4'000'000;
  c.gradient_bytes = 4'000'000;
  c.encoder_layers = 6;
  c.decoder_layers = 6;
  c.activations_plain.coefficients = {1e6, 1000, 0, 0, 0, 0};
  c.activations_checkpointed.coefficients = {1e6, 200, 0, 0, 0, 0};
  c.time_plain.coefficients = {0.1, 1e-4, 0};
  c.time_checkpointed.coefficients = {0.1, 1.3e-4, 0};
  c.adamw = {100'000, 0.01};
  c.adafactor = {100'000, 0.02};
  return c;
}

TEST(Planner, ChoosesTheFastestCandidateThatFitsAndKeepsTheEffectiveBatch) {
  const auto c = synthetic_calibration();
  memory::PlanRequest request;
  request.effective_batch = 8;
  request.source_length = 512;
  request.target_length = 64;
  request.budget = 12'000'000;
  const auto plan = memory::choose_plan(c, request);
  // micro-batches 8, 4, 2, 1 x checkpointing none, 3 of 6, all x two optimizers
  ASSERT_EQ(plan.candidates.size(), 4u * 3u * 2u);
  ASSERT_TRUE(plan.chosen.has_value());
  const auto& chosen = plan.candidates[*plan.chosen];
  EXPECT_TRUE(chosen.fits);
  for (const auto& k : plan.candidates) {
    EXPECT_EQ(k.knobs.micro_batch * k.knobs.accumulation, 8);
    EXPECT_EQ(k.fits, static_cast<double>(k.prediction.peak) * 1.05 <= 12e6);
    if (k.fits) EXPECT_LE(k.prediction.tokens_per_second, chosen.prediction.tokens_per_second * 1.0001);
  }
  // AdamW's 8 MB of state leaves no room for activations here: the planner picks Adafactor.
  EXPECT_EQ(chosen.knobs.optimizer, optim::OptimizerType::adafactor);
  // adafactor state (10k + 10k) x 4 B = 80 kB; 4 + 4 + 0.08 MB static; 1 MB + 512 kB x micro-batch plain.
  EXPECT_EQ(chosen.prediction.optimizer_state, 80'000u);
  EXPECT_NE(plan.explanation.find("fastest"), std::string::npos) << plan.explanation;
}

TEST(Planner, KeepsExplicitKnobsAndNamesTheBudgetWhenNothingFits) {
  const auto c = synthetic_calibration();
  memory::PlanRequest request;
  request.effective_batch = 8;
  request.source_length = 512;
  request.target_length = 64;
  request.micro_batch = 2;  // --no_resplit
  request.optimizer = optim::OptimizerType::adamw_torch;
  request.checkpointed_layers = 6;
  request.budget = 12'000'000;
  const auto plan = memory::choose_plan(c, request);
  ASSERT_EQ(plan.candidates.size(), 1u);
  EXPECT_EQ(plan.candidates[0].knobs.accumulation, 4);
  EXPECT_FALSE(plan.chosen.has_value());
  // 4 + 4 + 8 MB static + (1 MB + 2 x 512 x 200 B) activations, plus the 5% margin.
  const double peak = 16e6 + 1e6 + 2 * 512 * 200;
  EXPECT_EQ(plan.candidates[0].prediction.peak, static_cast<std::uint64_t>(peak));
  EXPECT_EQ(plan.minimum_budget, static_cast<std::uint64_t>(std::ceil(peak * 1.05)));
  EXPECT_NE(plan.explanation.find("no candidate fits"), std::string::npos) << plan.explanation;
}

struct LimitReset {
  ~LimitReset() { memory::TrackingCpuAllocator::instance().set_limit(0); }
};

struct RunRecord {
  std::vector<double> losses;
  std::vector<std::string> messages;
  std::int64_t peak = 0;
  std::int64_t oom_splits = 0;
  std::vector<torch::Tensor> weights;
};

// Three steps of micro-batch 4 on a dropout-free model; `limit_after_first_step` > 0 lowers the budget to that
// many bytes above the allocator's count at the start once the first step is done.
RunRecord train_three_steps(std::int64_t micro_batch, std::int64_t accumulation, std::int64_t limit_after_first_step,
                            bool fail_one_backward = false) {
  auto& allocator = memory::TrackingCpuAllocator::instance();
  const auto baseline = allocator.current_bytes();
  auto grid = grid_model_small();
  grid.overrides += ",dropout=0.0,attention_dropout=0.0,activation_dropout=0.0";
  auto model = make_grid_model(grid);
  train::TrainingArguments args;
  args.output_dir = temp_dir("oom-recovery").string();
  args.overwrite_output_dir = true;
  args.max_steps = 3;
  args.logging_steps = 1;
  args.save_strategy = train::IntervalStrategy::no;
  args.optim = optim::OptimizerType::adafactor;
  args.per_device_train_batch_size = micro_batch;
  args.gradient_accumulation_steps = accumulation;
  train::TrainerInputs inputs;
  inputs.model = model;
  inputs.train_examples = fixed_length_examples(12, 128, 32, model->config().vocab_size);
  RunRecord record;
  train::TrainerCallbacks callbacks;
  callbacks.on_log = [&](const nlohmann::ordered_json& entry) {
    if (entry.contains("loss")) record.losses.push_back(entry["loss"].get<double>());
    if (entry.contains("peak_memory_bytes")) {
      record.peak = std::max(record.peak, entry["peak_memory_bytes"].get<std::int64_t>() - baseline);
    }
    if (entry.contains("oom_splits")) record.oom_splits += entry["oom_splits"].get<std::int64_t>();
  };
  callbacks.on_message = [&](const std::string& m) { record.messages.push_back(m); };
  // An out-of-memory error in the middle of a backward, once, in step 2: raised from a gradient hook, as the
  // allocator would raise it, after part of the gradients are already accumulated.
  auto armed = std::make_shared<bool>(false);
  if (fail_one_backward) {
    model->named_parameters()["model.encoder.layers.0.fc1.weight"].register_hook([armed](const torch::Tensor& grad) {
      if (*armed) {
        *armed = false;
        TORCH_CHECK_WITH(OutOfMemoryError, false, "injected: out of memory during backward");
      }
      return grad;
    });
  }
  callbacks.on_step = [&](std::int64_t step, std::int64_t) {
    if (step == 1 && limit_after_first_step > 0) allocator.set_limit(baseline + limit_after_first_step);
    if (step == 1 && fail_one_backward) *armed = true;
  };
  LimitReset reset;
  train::Trainer trainer(args, std::move(inputs), callbacks);
  const auto result = trainer.train();
  EXPECT_EQ(result.global_step, 3);
  allocator.set_limit(0);
  for (const auto& p : model->named_parameters()) {
    // k_proj biases get no true gradient (softmax is shift-invariant), only rounding noise: not comparable.
    if (p.key().find("k_proj.bias") == std::string::npos) record.weights.push_back(p.value().detach().clone());
  }
  return record;
}

TEST(TrainerRecovery, OutOfMemoryMidRunSplitsTheMicroBatchAndKeepsTheUpdate) {
  const auto whole = train_three_steps(4, 1, 0);
  const auto halves = train_three_steps(2, 2, 0);
  ASSERT_LT(halves.peak, whole.peak);
  // Between the two: micro-batch 4 no longer fits, micro-batch 2 does.
  const auto recovered = train_three_steps(4, 1, (whole.peak + halves.peak) / 2);
  std::string log;
  for (const auto& m : recovered.messages) log += m + "\n";
  EXPECT_NE(log.find("out of memory in the"), std::string::npos) << log;
  EXPECT_NE(log.find("split into 2 + 2"), std::string::npos) << log;
  EXPECT_GE(recovered.oom_splits, 2) << log;
  EXPECT_NE(log.find("re-planned with gradient checkpointing"), std::string::npos) << log;
  // The same examples in every step: the same losses and the same weights as the run that never ran out.
  ASSERT_EQ(recovered.losses.size(), whole.losses.size());
  for (std::size_t i = 0; i < whole.losses.size(); ++i)
    EXPECT_CLOSE(recovered.losses[i], whole.losses[i], relative(1e-6));
  ASSERT_EQ(recovered.weights.size(), whole.weights.size());
  for (std::size_t i = 0; i < whole.weights.size(); ++i) {
    EXPECT_CLOSE(recovered.weights[i], whole.weights[i], relative(1e-4)) << "parameter " << i;
  }
}

TEST(TrainerRecovery, OutOfMemoryInBackwardRedoesTheStepWithSplitMicroBatches) {
  const auto whole = train_three_steps(4, 1, 0);
  const auto recovered = train_three_steps(4, 1, 0, /*fail_one_backward=*/true);
  std::string log;
  for (const auto& m : recovered.messages) log += m + "\n";
  EXPECT_NE(log.find("out of memory in the backward of a micro-batch of 4 examples at step 2: split into 2 + 2, "
                     "redoing the step"),
            std::string::npos)
      << log;
  EXPECT_EQ(recovered.oom_splits, 1);
  ASSERT_EQ(recovered.losses.size(), whole.losses.size());
  for (std::size_t i = 0; i < whole.losses.size(); ++i)
    EXPECT_CLOSE(recovered.losses[i], whole.losses[i], relative(1e-6));
  ASSERT_EQ(recovered.weights.size(), whole.weights.size());
  for (std::size_t i = 0; i < whole.weights.size(); ++i) {
    EXPECT_CLOSE(recovered.weights[i], whole.weights[i], relative(1e-4)) << "parameter " << i;
  }
}

}  // namespace
}  // namespace fitsum::test
