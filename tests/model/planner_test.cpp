// The memory planner: predicted peaks against peaks measured by training (a subset of the grid; the full grid is
// tests/slow/planner_grid_test.cpp), the chooser's rules on a synthetic calibration, and out-of-memory recovery in
// the trainer (a budget lowered mid-run, an error injected into a backward: the step is split or redone, covers the
// same examples and training finishes).
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/memory/calibration.h"
#include "fitsum/memory/fit.h"
#include "fitsum/memory/planner.h"
#include "fitsum/memory/tracking_allocator.h"
#include "planner_grid.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

void expect_within_ten_percent_and_not_under_the_margin(const std::vector<GridCell>& cells) {
  for (const auto& c : cells) {
    const auto what = c.model + " micro-batch " + std::to_string(c.knobs.micro_batch) + " checkpointed " +
                      std::to_string(c.knobs.encoder_checkpointed) + "+" +
                      std::to_string(c.knobs.decoder_checkpointed) + " " + optim::to_string(c.knobs.optimizer) +
                      ": predicted " + std::to_string(c.predicted) + ", measured " + std::to_string(c.measured);
    EXPECT_LE(std::abs(c.error()), 0.10) << what;
    EXPECT_GE(c.error(), -memory::kPlanMargin) << what;
  }
}

void expect_grid_subset_within_ten_percent(const GridModel& model) {
  std::vector<GridCell> cells;
  run_grid(model, {1, 4}, {128}, 32, {kNone, GridCheckpointing{1, 0}, GridCheckpointing{0, 1}, kEvery},
           {optim::OptimizerType::adamw_torch, optim::OptimizerType::adafactor}, cells);
  print_grid(cells);
  ASSERT_EQ(cells.size(), 16u);
  expect_within_ten_percent_and_not_under_the_margin(cells);
}

TEST(Planner, PredictedPeakWithinTenPercentOfMeasuredOnASubsetOfTheGrid) {
  expect_grid_subset_within_ten_percent(grid_model_small());
}

// BART's blocks store other tensors (post-LayerNorm, layernorm_embedding, learned positions): the same probe and
// model must hold for them.
TEST(Planner, PredictedPeakWithinTenPercentOfMeasuredForBart) {
  expect_grid_subset_within_ten_percent(grid_model_bart_small());
}

// T5 stores other tensors again (RMSNorm's float32 variance, the relative position bias added to every layer's scores,
// v1.1's two input projections): the same probe and model must hold for v1.0 and v1.1.
TEST(Planner, PredictedPeakWithinTenPercentOfMeasuredForT5) {
  expect_grid_subset_within_ten_percent(grid_model_t5_small());
  expect_grid_subset_within_ten_percent(grid_model_flan_t5_small());
}

// T5's layers share one attention mask that carries the trained position bias, (B, heads, S, S): a plain layer above
// a checkpointed one leaves its accumulated gradient behind while the one below recomputes. At 512 source tokens that
// is 4 MiB per row, which the probe's all-or-nothing copies never saw (the full grid under-predicted these cells by
// up to 8.8%); the copy with only its bottom layers checkpointed measures it (LayerMemory's `_mixed` terms).
TEST(Planner, PlainT5LayerAboveACheckpointedOneAtLongSources) {
  std::vector<GridCell> cells;
  run_grid(grid_model_t5_small(), {1, 8}, {512}, 64,
           {GridCheckpointing{1, 0}, GridCheckpointing{1, 2}, GridCheckpointing{0, 1}},
           {optim::OptimizerType::adafactor}, cells);
  print_grid(cells);
  ASSERT_EQ(cells.size(), 6u);
  expect_within_ten_percent_and_not_under_the_margin(cells);
}

// A calibration with round numbers for a 6 + 6 layer model: per row, an encoder layer stores 100 B per source token
// (20 B checkpointed), a decoder layer 100 B per target token (20 B checkpointed); the decoder phase's rest is 1 MB
// (plus one decoder layer's 100 B per target token while recomputing), the encoder phase's 0.5 MB (plus one encoder
// layer's 100 B per source token).
memory::Calibration synthetic_calibration() {
  memory::Calibration c;
  c.config = model::pegasus_shape("small");  // 6 + 6 layers: FLOPs for the speed model
  // The synthetic rests hold no LM head: with a small vocabulary no shape here runs the loss head chunked
  // (memory::LossHeadModes), which would subtract a head these numbers do not have.
  c.config.vocab_size = 8000;
  c.counts.trainable = 1'000'000;
  c.counts.matrix_elements = 990'000;
  c.counts.matrix_rows_plus_cols = 10'000;
  c.counts.vector_elements = 10'000;
  c.weight_bytes = 4'000'000;
  c.gradient_bytes = 4'000'000;
  c.encoder_layers = 6;
  c.decoder_layers = 6;
  c.memory.encoder_plain.coefficients = {0, 100, 0, 0, 0, 0};
  c.memory.encoder_checkpointed.coefficients = {0, 20, 0, 0, 0, 0};
  c.memory.decoder_plain.coefficients = {0, 0, 100, 0, 0, 0};
  c.memory.decoder_checkpointed.coefficients = {0, 0, 20, 0, 0, 0};
  c.memory.decoder_rest.coefficients = {1e6, 0, 0, 0, 0, 0};
  c.memory.decoder_recompute.coefficients = {1e6, 0, 100, 0, 0, 0};
  c.memory.encoder_rest.coefficients = {5e5, 0, 0, 0, 0, 0};
  c.memory.encoder_recompute.coefficients = {5e5, 100, 0, 0, 0, 0};
  c.speed.flops_per_second = 1e11;
  c.speed.overhead_seconds = 0.05;
  c.adamw = {100'000, 0.01};
  c.adafactor = {100'000, 0.02};
  return c;
}

// The synthetic calibration's request: effective batch 8, 512 source and 64 target tokens; with `fixed`, that optimizer
// as an explicit --optim.
memory::PlanRequest synthetic_request(std::optional<optim::OptimizerType> fixed = std::nullopt) {
  memory::PlanRequest request;
  request.effective_batch = 8;
  request.source_length = 512;
  request.target_length = 64;
  if (fixed) {
    request.optimizer = *fixed;
    request.optimizer_policy = memory::OptimizerPolicy::fixed;
  }
  return request;
}

TEST(Planner, TheTransientFollowsTheLayerModel) {
  const auto c = synthetic_calibration();
  const memory::BatchShape shape{2, 512, 64};
  // No checkpointing: the decoder phase, 1 MB + 6 x 2 x 512 x 100 + 6 x 2 x 64 x 100.
  EXPECT_DOUBLE_EQ(c.memory.transient(shape, 6, 6, 0, 0), 1e6 + 614400 + 76800);
  // Everything checkpointed: decoder recompute 1 MB + 12800 + 6 x 2 x 512 x 20 + 6 x 2 x 64 x 20 = 1151040;
  // encoder recompute 0.5 MB + 102400 + 122880 = 725280.
  EXPECT_DOUBLE_EQ(c.memory.transient(shape, 6, 6, 6, 6), 1e6 + 12800 + 122880 + 15360);
  // The bottom 2 decoder layers: the top is plain, so the start of backward holds 4 plain + 2 checkpointed layers.
  EXPECT_DOUBLE_EQ(c.memory.transient(shape, 6, 6, 0, 2), 1e6 + 614400 + 2 * 2560 + 4 * 12800);
  // The bottom 3 encoder layers: 3 x 102400 + 3 x 20480 stored under a plain decoder.
  EXPECT_DOUBLE_EQ(c.memory.transient(shape, 6, 6, 3, 0), 1e6 + 3 * 102400 + 3 * 20480 + 76800);
}

// What one process of a data-parallel job measured, as numbers, rebuilds the same calibration in another.
TEST(Planner, ACalibrationTravelsAsNumbers) {
  auto c = synthetic_calibration();
  c.memory.decoder_mixed.coefficients = {1.5, -2.25, 3e-9, 4, 5, 6.125};
  c.memory.encoder_forward_checkpointed.coefficients = {7, 0, 0, 1e-3, 0, 8};
  c.probe_seconds = 3.5;
  memory::ProbeSample sample;
  sample.shape = {3, 257, 65};
  sample.encoder_layers = 2;
  sample.decoder_layers = 1;
  sample.checkpointing = memory::ProbeCheckpointing::bottom;
  sample.stored_bytes = (std::uint64_t{1} << 40) + 3;
  sample.encoder_forward_bytes = 11;
  sample.decoder_forward_bytes = 12;
  sample.decoder_phase_bytes = 13;
  sample.encoder_phase_bytes = 14;
  sample.flops = 1.25e12;
  sample.seconds = 0.75;
  sample.peak_allocated_bytes = 21;
  sample.peak_reserved_bytes = (std::uint64_t{1} << 41) + 22;  // the caching allocator's segments, beyond allocated
  c.adafactor.peak_reserved_bytes = 23;
  c.samples = {sample, memory::ProbeSample{}};
  memory::CalibrationOptions options;
  const auto numbers = memory::calibration_numbers(c);
  const auto back = memory::calibration_from_numbers(c.config, options, numbers);
  const std::array<std::pair<const memory::ShapeFit*, const memory::ShapeFit*>, 3> fits{{
      {&c.memory.decoder_mixed, &back.memory.decoder_mixed},
      {&c.memory.encoder_forward_checkpointed, &back.memory.encoder_forward_checkpointed},
      {&c.memory.decoder_recompute, &back.memory.decoder_recompute},
  }};
  for (const auto& [sent, received] : fits) EXPECT_EQ(sent->coefficients, received->coefficients);
  EXPECT_EQ(back.speed.flops_per_second, c.speed.flops_per_second);
  EXPECT_EQ(back.speed.overhead_seconds, c.speed.overhead_seconds);
  EXPECT_EQ(back.adamw.transient_bytes, c.adamw.transient_bytes);
  EXPECT_EQ(back.adafactor.seconds, c.adafactor.seconds);
  EXPECT_EQ(back.probe_seconds, 3.5);
  ASSERT_EQ(back.samples.size(), 2u);
  const auto& s = back.samples[0];
  EXPECT_EQ(s.shape.batch, 3);
  EXPECT_EQ(s.shape.source, 257);
  EXPECT_EQ(s.shape.target, 65);
  EXPECT_EQ(s.encoder_layers, 2);
  EXPECT_EQ(s.checkpointing, memory::ProbeCheckpointing::bottom);
  EXPECT_EQ(s.stored_bytes, sample.stored_bytes);
  EXPECT_EQ(s.encoder_phase_bytes, 14u);
  EXPECT_EQ(s.flops, 1.25e12);
  EXPECT_EQ(s.peak_allocated_bytes, 21u);
  EXPECT_EQ(s.peak_reserved_bytes, sample.peak_reserved_bytes);
  EXPECT_EQ(back.adafactor.peak_reserved_bytes, 23u);
  // Every prediction is the same (the counts come from the config in both: set the synthetic ones aside).
  auto sent = c;
  sent.counts = back.counts;
  sent.weight_bytes = back.weight_bytes;
  sent.gradient_bytes = back.gradient_bytes;
  memory::PlanKnobs knobs;
  knobs.micro_batch = 2;
  knobs.encoder_checkpointed = 3;
  const memory::BatchShape worst{1, 512, 64};
  EXPECT_EQ(memory::predict(back, knobs, worst).peak, memory::predict(sent, knobs, worst).peak);
  // Numbers that are not a calibration's are refused, naming what is wrong.
  const auto refusal = [&](const std::vector<double>& wrong) -> std::string {
    try {
      memory::calibration_from_numbers(c.config, options, wrong);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(accepted)";
  };
  auto truncated = numbers;
  truncated.pop_back();
  EXPECT_NE(refusal(truncated).find("for 2 samples"), std::string::npos) << refusal(truncated);
  auto negative = numbers;
  negative[1 + 96 + 2] = -1.0;  // adamw's transient bytes, after the version and 16 fits of 6 coefficients
  EXPECT_NE(refusal(negative).find("not a count"), std::string::npos) << refusal(negative);
  EXPECT_NE(refusal({2.0}).find("not a calibration's"), std::string::npos) << refusal({2.0});
}

TEST(Planner, KeepsTheEffectiveBatchAndFallsBackFromAdamWOnlyWhenItCannotFit) {
  const auto c = synthetic_calibration();
  auto request = synthetic_request();
  request.budget = 12'000'000;  // AdamW's 16 MB of static memory cannot fit
  const auto plan = memory::choose_plan(c, request);
  ASSERT_TRUE(plan.chosen.has_value());
  const auto& chosen = plan.candidates[*plan.chosen];
  EXPECT_TRUE(chosen.fits);
  EXPECT_EQ(chosen.knobs.optimizer, optim::OptimizerType::adafactor);
  ASSERT_TRUE(plan.preferred_optimizer_best.has_value());
  EXPECT_EQ(plan.preferred_optimizer_best->knobs.optimizer, optim::OptimizerType::adamw_torch);
  EXPECT_FALSE(plan.preferred_optimizer_best->fits);
  for (const auto& k : plan.candidates) {
    EXPECT_EQ(k.knobs.micro_batch * k.knobs.accumulation, 8);
    EXPECT_EQ(k.fits, static_cast<double>(k.prediction.peak) * 1.05 <= 12e6);
    if (k.fits) EXPECT_LE(k.prediction.tokens_per_second, chosen.prediction.tokens_per_second * 1.0301);
  }
  // adafactor state (10k + 10k) x 4 B = 80 kB.
  EXPECT_EQ(chosen.prediction.optimizer_state, 80'000u);
  EXPECT_NE(plan.explanation.find("fastest"), std::string::npos) << plan.explanation;

  // With room for AdamW it is kept, although Adafactor would be as fast: the user's (HF's default) optimizer.
  request.budget = 40'000'000;
  const auto roomy = memory::choose_plan(c, request);
  ASSERT_TRUE(roomy.chosen.has_value());
  EXPECT_EQ(roomy.candidates[*roomy.chosen].knobs.optimizer, optim::OptimizerType::adamw_torch);
  EXPECT_FALSE(roomy.preferred_optimizer_best.has_value());
  // A fixed optimizer is never changed: nothing fits at 12 MB with AdamW fixed.
  request.budget = 12'000'000;
  request.optimizer_policy = memory::OptimizerPolicy::fixed;
  const auto fixed = memory::choose_plan(c, request);
  EXPECT_FALSE(fixed.chosen.has_value());
  for (const auto& k : fixed.candidates) EXPECT_EQ(k.knobs.optimizer, optim::OptimizerType::adamw_torch);
}

// With several processes each candidate comes with ZeRO stages 0, 1 and 2: sharding the optimizer state by tensor
// divides it (the largest share is what a process holds), stage 2 the gradients too (the share, plus what a backward
// holds before it is summed), and a stage is chosen only where the lower ones do not fit as fast.
TEST(Planner, ShardsTheOptimizerStateAndGradientsOnlyWhereLowerStagesDoNotFitAsFast) {
  auto c = synthetic_calibration();
  c.counts.trainable_tensors.clear();
  for (int i = 0; i < 19; ++i) c.counts.trainable_tensors.push_back({50'000, 2000});
  for (int i = 0; i < 5; ++i) c.counts.trainable_tensors.push_back({10'000, 0});
  auto request = synthetic_request(optim::OptimizerType::adamw_torch);
  request.world_size = 2;
  request.bucket_bytes = 50'000;
  request.budget = 40'000'000;
  const auto roomy = memory::choose_plan(c, request);
  ASSERT_TRUE(roomy.chosen.has_value());
  EXPECT_EQ(roomy.candidates[*roomy.chosen].knobs.zero_stage, 0);  // as fast, and nothing to gain
  std::array<std::size_t, 3> per_stage{};
  for (const auto& k : roomy.candidates) {
    EXPECT_EQ(k.knobs.world_size, 2);
    per_stage.at(static_cast<std::size_t>(k.knobs.zero_stage)) += 1;
    if (k.knobs.zero_stage == 0) {
      EXPECT_EQ(k.prediction.optimizer_state, 8'000'000u);  // AdamW: 2 x 1M x 4 B
      EXPECT_EQ(k.prediction.gradients, 4'000'000u);
      continue;
    }
    // Largest first to the lighter share: the 50k tensors alternate (10 to rank 0, 9 to rank 1), the 10k ones go to
    // rank 1: 500k elements each, x 8 B of AdamW state.
    EXPECT_EQ(k.prediction.optimizer_state, 4'000'000u);
    // Its update's transient: the broadcast bucket of a share's small tensors, 500k x 4 B.
    EXPECT_GE(k.prediction.optimizer_transient, 2'000'000u);
    // Stage 2: the share's 2 MB of gradients throughout; in the backward, the two largest gradients (0.4 MB) and two
    // buckets (0.1 MB) in flight and a packed bucket (at most 50 KB), a transient beside the activations.
    EXPECT_EQ(k.prediction.gradients, k.knobs.zero_stage == 2 ? 2'000'000u : 4'000'000u);
    if (k.knobs.zero_stage == 2) EXPECT_GE(k.prediction.activations, 500'000u + 50'000u);
  }
  EXPECT_EQ(per_stage[0], per_stage[1]);
  EXPECT_EQ(per_stage[0], per_stage[2]);
  // 16 MB of static memory with stage 0, 12 MB with stage 1 (+ 2 MB of bucket): only sharded candidates fit in 15 MB,
  // and stage 1 is as fast as stage 2.
  request.budget = 15'000'000;
  const auto tight = memory::choose_plan(c, request);
  ASSERT_TRUE(tight.chosen.has_value());
  const auto& chosen = tight.candidates[*tight.chosen];
  EXPECT_EQ(chosen.knobs.zero_stage, 1);
  EXPECT_NE(memory::plan_arguments(chosen.knobs, c).find("--zero_stage 1"), std::string::npos);
  EXPECT_NE(tight.explanation.find("ZeRO stage 1"), std::string::npos) << tight.explanation;
  // The smallest budget each fixed stage fits in: just below stage 1's, only stage 2 fits, and it is chosen.
  const auto smallest_budget = [&](std::optional<int> stage) {
    auto r = request;
    r.zero_stage = stage;
    std::uint64_t low = 1'000'000, high = 40'000'000;
    while (high - low > 1000) {
      r.budget = (low + high) / 2;
      (memory::choose_plan(c, r).chosen ? high : low) = r.budget;
    }
    return high;
  };
  const auto stage1 = smallest_budget(1), stage2 = smallest_budget(2);
  ASSERT_LT(stage2 + 100'000, stage1);
  request.budget = stage1 - 50'000;
  const auto tighter = memory::choose_plan(c, request);
  ASSERT_TRUE(tighter.chosen.has_value());
  EXPECT_EQ(tighter.candidates[*tighter.chosen].knobs.zero_stage, 2);
  EXPECT_NE(memory::plan_arguments(tighter.candidates[*tighter.chosen].knobs, c).find("--zero_stage 2"),
            std::string::npos);
  EXPECT_NE(tighter.explanation.find("ZeRO stage 2"), std::string::npos) << tighter.explanation;
  // Stage 0 fixed (--zero_stage 0): nothing fits; one process: no sharded candidate at all.
  request.budget = 15'000'000;
  request.zero_stage = 0;
  EXPECT_FALSE(memory::choose_plan(c, request).chosen.has_value());
  request.zero_stage.reset();
  request.world_size = 1;
  for (const auto& k : memory::choose_plan(c, request).candidates) EXPECT_EQ(k.knobs.zero_stage, 0);
}

TEST(Planner, ChecksTheLeastRecomputationThatFitsAmongEveryLayerSet) {
  const auto c = synthetic_calibration();
  auto request = synthetic_request(optim::OptimizerType::adafactor);
  request.micro_batch = 8;
  // Between no checkpointing (8.08 MB + 3.76 MB) and all (8.08 MB + 1.60 MB), with the margin.
  request.budget = 11'000'000;
  const auto plan = memory::choose_plan(c, request);
  ASSERT_TRUE(plan.chosen.has_value());
  const auto& chosen = plan.candidates[*plan.chosen];
  EXPECT_TRUE(chosen.knobs.checkpointing());
  EXPECT_FALSE(chosen.knobs.encoder_checkpointed == 6 && chosen.knobs.decoder_checkpointed == 6)
      << "a partial set fits and recomputes less";
  ASSERT_EQ(plan.candidates.size(), 3u);  // none, the partial set, all
  // Exhaustively: no other set fits with less recomputation.
  for (std::int64_t ce = 0; ce <= 6; ++ce) {
    for (std::int64_t cd = 0; cd <= 6; ++cd) {
      memory::PlanKnobs k = chosen.knobs;
      k.encoder_checkpointed = ce;
      k.decoder_checkpointed = cd;
      const auto p = memory::predict(c, k, {1, 512, 64});
      if (static_cast<double>(p.peak) * 1.05 <= 11e6) {
        EXPECT_GE(p.recompute_flops, chosen.prediction.recompute_flops) << ce << "+" << cd;
      }
    }
  }
  // Recomputation is counted work: an encoder layer's forward at 512 source tokens, a decoder layer's at 64 targets.
  const auto f = model::forward_matmul_flops(c.config, 8, 512, 64);
  EXPECT_DOUBLE_EQ(chosen.prediction.recompute_flops,
                   static_cast<double>(chosen.knobs.encoder_checkpointed) * f.encoder_layer +
                       static_cast<double>(chosen.knobs.decoder_checkpointed) * f.decoder_layer);
}

TEST(Planner, EquallyFastCandidatesAreBrokenByAFixedRuleNotByTimingNoise) {
  auto c = synthetic_calibration();
  auto request = synthetic_request(optim::OptimizerType::adafactor);
  request.budget = 11'000'000;  // micro-batch 8 needs a partial set; 4 fits without checkpointing
  const auto probe = memory::choose_plan(c, request);
  const memory::Candidate* eight = nullptr;
  for (const auto& k : probe.candidates) {
    if (k.knobs.micro_batch == 8 && k.fits && k.knobs.checkpointing() && (!eight || k.prediction.recompute_flops <
                                                                                      eight->prediction.recompute_flops)) {
      eight = &k;
    }
  }
  ASSERT_NE(eight, nullptr);
  // 8 x 1 with recomputation against 4 x 2 without: equally fast when one micro-step's overhead costs what the
  // recomputation does. Timing noise of 2% either way must not flip the choice.
  const double tie = eight->prediction.recompute_flops / c.speed.flops_per_second;
  std::vector<memory::PlanKnobs> chosen;
  for (const double noise : {0.98, 1.0, 1.02}) {
    c.speed.overhead_seconds = tie * noise;
    const auto plan = memory::choose_plan(c, request);
    ASSERT_TRUE(plan.chosen.has_value());
    chosen.push_back(plan.candidates[*plan.chosen].knobs);
  }
  for (const auto& k : chosen) {
    EXPECT_EQ(k.micro_batch, 4);  // the rule: least recomputation first
    EXPECT_FALSE(k.checkpointing());
  }
}

TEST(Planner, KeepsExplicitKnobsAndNamesTheBudgetWhenNothingFits) {
  const auto c = synthetic_calibration();
  auto request = synthetic_request(optim::OptimizerType::adamw_torch);
  request.micro_batch = 2;  // --no_resplit
  request.checkpointed_layers = std::pair<std::int64_t, std::int64_t>{6, 6};
  request.budget = 12'000'000;
  const auto plan = memory::choose_plan(c, request);
  ASSERT_EQ(plan.candidates.size(), 1u);
  EXPECT_EQ(plan.candidates[0].knobs.accumulation, 4);
  EXPECT_FALSE(plan.chosen.has_value());
  // 4 + 4 + 8 MB static + the decoder's recompute phase at micro-batch 2: 1 MB + 12800 + 122880 + 15360.
  const double peak = 16e6 + 1e6 + 12800 + 122880 + 15360;
  EXPECT_EQ(plan.candidates[0].prediction.peak, static_cast<std::uint64_t>(peak));
  EXPECT_EQ(plan.minimum_budget, static_cast<std::uint64_t>(std::ceil(peak * 1.05)));
  EXPECT_NE(plan.explanation.find("no candidate fits"), std::string::npos) << plan.explanation;
}

// Evaluation under the same budget: each candidate evaluates with the largest per_device_eval_batch_size (up to the
// requested one) that fits beside its weights, gradients and optimizer state, and its peak covers evaluation; when
// not even one example can be evaluated, nothing fits and the minimum budget says what evaluation needs.
TEST(Planner, EvaluationBatchIsLoweredUntilItFitsAndCountsInThePeak) {
  const auto c = synthetic_calibration();  // pegasus-small's widths (6 + 6 layers, d_model 512), 8000 tokens
  memory::EvaluationLoad load;
  load.batch = 64;
  load.num_beams = 8;
  load.source_length = 512;
  load.target_length = 64;
  load.max_length = 128;
  auto request = synthetic_request(optim::OptimizerType::adafactor);
  request.micro_batch = 8;
  request.evaluation = load;
  const auto resident = 8'000'000 + memory::static_training_memory(c.counts, optim::OptimizerType::adafactor,
                                                                   memory::StorageDtype::fp32)
                                        .optimizer_state;
  auto at = [&](std::int64_t batch) {
    auto l = load;
    l.batch = batch;
    return memory::predict_evaluation(c.config, l).peak();
  };
  // Room for 5 examples (8 beams each) but not 6.
  request.budget = static_cast<std::uint64_t>(std::ceil((resident + at(5)) * 1.05)) + 1;
  ASSERT_GT(static_cast<double>(resident + at(6)) * 1.05, static_cast<double>(request.budget));
  auto plan = memory::choose_plan(c, request);
  ASSERT_TRUE(plan.chosen.has_value()) << plan.explanation;
  const auto& chosen = plan.candidates[*plan.chosen];
  EXPECT_EQ(chosen.knobs.eval_batch, 5);
  EXPECT_EQ(chosen.prediction.evaluation, at(5));
  EXPECT_EQ(chosen.prediction.peak, resident + at(5));  // evaluation, not the tiny training step, sets the peak
  // Another process of a data-parallel job re-predicts rank 0's knobs: predict() and add_evaluation() at the plan's
  // eval batch give the planner's own numbers, evaluation included (predict() alone is training's, below).
  auto again = memory::predict(c, chosen.knobs, {1, request.source_length, request.target_length});
  EXPECT_LT(again.peak, chosen.prediction.peak);
  memory::add_evaluation(c.config, load, chosen.knobs.eval_batch, again);
  EXPECT_EQ(again.evaluation, chosen.prediction.evaluation);
  EXPECT_EQ(again.peak, chosen.prediction.peak);
  // Without evaluation the same budget keeps the plan and its peak is training's.
  auto without = request;
  without.evaluation.reset();
  const auto training_only = memory::choose_plan(c, without);
  ASSERT_TRUE(training_only.chosen.has_value());
  EXPECT_EQ(training_only.candidates[*training_only.chosen].knobs.eval_batch, 0);
  EXPECT_LT(training_only.candidates[*training_only.chosen].prediction.peak, resident + at(1));
  // One example does not fit: no plan, and the minimum budget is evaluation's.
  request.budget = resident + at(1);
  plan = memory::choose_plan(c, request);
  EXPECT_FALSE(plan.chosen.has_value());
  EXPECT_EQ(plan.minimum_budget, static_cast<std::uint64_t>(std::ceil((resident + at(1)) * 1.05)));
}

// On CUDA the budget caps the allocator model's reserved bytes (memory/cuda_allocator_model.h), of which the
// predicted peak is a part: here the cuBLAS workspace (32 MiB) and 20 MiB segments dwarf the synthetic model.
TEST(Planner, OnCudaTheBudgetCapsPredictedReservedBytes) {
  const auto c = synthetic_calibration();
  auto request = synthetic_request();
  request.optimizer_policy = memory::OptimizerPolicy::free;
  request.budget = std::uint64_t{1} << 40;
  memory::CudaPlanInputs cuda;
  cuda.model.parameter_shapes = {{990, 1000}, {10'000}};  // the calibration's 1M parameters
  cuda.model.d_model = 64;
  request.cuda = cuda;
  request.budget_caps_reserved = true;
  std::vector<std::uint64_t> needed;
  for (const auto& k : memory::choose_plan(c, request).candidates) {
    ASSERT_TRUE(k.cuda.has_value());
    EXPECT_GE(k.cuda->reserved, k.cuda->allocated);
    EXPECT_GE(k.cuda->allocated, k.cuda->requested);
    EXPECT_GE(k.cuda->reserved, k.prediction.peak + k.cuda->cublas_workspace);
    needed.push_back(static_cast<std::uint64_t>(std::ceil(static_cast<double>(k.cuda->reserved) * 1.05)));
  }
  std::sort(needed.begin(), needed.end());
  ASSERT_LT(needed.front(), needed.back());
  request.budget = needed[needed.size() / 2];  // about half the candidates fit
  const auto plan = memory::choose_plan(c, request);
  ASSERT_TRUE(plan.chosen.has_value());
  std::size_t fitting = 0;
  for (const auto& k : plan.candidates) {
    const auto reserved_needs = static_cast<std::uint64_t>(std::ceil(static_cast<double>(k.cuda->reserved) * 1.05));
    EXPECT_EQ(k.fits, reserved_needs <= request.budget);
    EXPECT_LE(static_cast<double>(k.prediction.peak) * 1.05, static_cast<double>(request.budget));  // all by peak
    fitting += k.fits ? 1 : 0;
  }
  EXPECT_LT(fitting, plan.candidates.size());
  // The same terms reported, the peak capped (a plan made on the CPU for a CUDA device): everything fits.
  request.budget_caps_reserved = false;
  for (const auto& k : memory::choose_plan(c, request).candidates) {
    EXPECT_TRUE(k.cuda.has_value());
    EXPECT_TRUE(k.fits);
  }
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
