// The planner with low-rank adapters (memory/lora_memory.h): the static terms (what trains, what is stored, each
// optimizer's state) against full-depth models with the adapters applied, and predicted peaks against the peaks
// measured by training the adapters (the grid's LoRA cells; docs/memory.md lists them).
#include <cmath>
#include <unordered_set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/memory/calibration.h"
#include "fitsum/memory/fit.h"
#include "fitsum/memory/lora_memory.h"
#include "fitsum/memory/planner.h"
#include "fitsum/memory/static_memory.h"
#include "fitsum/util/bytes.h"
#include "planner_grid.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

// What a model with adapters holds, counted on its tensors (each once: the tied embedding has several names).
struct Held {
  std::int64_t trainable = 0;
  std::size_t trainable_tensors = 0;
  std::uint64_t weight_bytes = 0;
  std::uint64_t adafactor_state = 0;  // HF's Adafactor: rows + columns of a matrix, a vector's elements, float32
};

Held held_by(model::Seq2SeqLMImpl& model) {
  Held h;
  std::unordered_set<const void*> seen;
  for (const auto& p : model.parameters()) {
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
    h.weight_bytes += static_cast<std::uint64_t>(p.numel() * p.element_size());
    if (!p.requires_grad()) continue;
    h.trainable += p.numel();
    ++h.trainable_tensors;
    h.adafactor_state += 4 * static_cast<std::uint64_t>(p.dim() >= 2 ? p.size(0) + p.size(1) : p.numel());
  }
  for (const auto& b : model.buffers()) h.weight_bytes += static_cast<std::uint64_t>(b.numel() * b.element_size());
  return h;
}

struct Case {
  GridModel model;
  std::int64_t r = 16;
  std::vector<std::string> targets;
  model::LoraBias bias = model::LoraBias::none;
  std::vector<std::string> modules_to_save;
  bool base_bfloat16 = false;
};

// Deeper than the probe's 2 + 2 copy, and unequal stacks: the counts are extrapolated layer by layer.
GridModel deeper(GridModel m) {
  const bool t5 = m.config.find("t5") != std::string::npos;
  m.overrides += t5 ? ",num_layers=3,num_decoder_layers=5" : ",encoder_layers=3,decoder_layers=5";
  return m;
}

TEST(PlannerLora, StaticTermsMatchAFullDepthModelWithTheAdapters) {
  const auto pegasus = deeper(grid_model_small()), bart = deeper(grid_model_bart_small()),
             t5 = deeper(grid_model_t5_small()), flan = deeper(grid_model_flan_t5_small());
  const std::vector<Case> cases = {
      {pegasus, 16, {"all-linear"}},
      {pegasus, 8, {}, model::LoraBias::none, {}, true},
      {pegasus, 4, {"q_proj", "fc2"}, model::LoraBias::lora_only, {"self_attn_layer_norm"}, true},
      {bart, 16, {"all-linear"}, model::LoraBias::all, {}, true},
      {bart, 8, {}},
      {t5, 16, {"all-linear"}, model::LoraBias::none, {}, true},
      {t5, 8, {}},
      {flan, 16, {"all-linear"}, model::LoraBias::none, {"lm_head"}},
      {flan, 8, {}, model::LoraBias::none, {}, true},
  };
  for (const auto& c : cases) {
    model::LoraConfig lora;
    lora.r = c.r;
    lora.target_modules = c.targets;
    lora.bias = c.bias;
    lora.modules_to_save = c.modules_to_save;
    const auto what = c.model.name + " " + memory::lora_arguments(lora, c.base_bfloat16);
    auto model = make_grid_model(c.model);
    memory::apply_planned_lora(*model, lora, c.base_bfloat16);
    const auto held = held_by(*model);
    const auto planned = memory::lora_memory(model->config(), lora, c.base_bfloat16);
    EXPECT_EQ(planned.counts.trainable, held.trainable) << what;
    EXPECT_EQ(planned.counts.trainable_tensors.size(), held.trainable_tensors) << what;
    EXPECT_EQ(planned.weight_bytes, held.weight_bytes) << what;
    const auto adafactor =
        memory::static_training_memory(planned.counts, optim::OptimizerType::adafactor, memory::StorageDtype::fp32);
    const auto adamw =
        memory::static_training_memory(planned.counts, optim::OptimizerType::adamw_torch, memory::StorageDtype::fp32);
    EXPECT_EQ(adafactor.optimizer_state, held.adafactor_state) << what;
    EXPECT_EQ(adamw.optimizer_state, 8 * static_cast<std::uint64_t>(held.trainable)) << what;
    EXPECT_EQ(adamw.gradients, 4 * static_cast<std::uint64_t>(held.trainable)) << what;
  }
}

// Adapters of rank 16 on every Linear of pegasus-small's layout (8000 tokens) train 4.5% of its parameters: the
// gradients and optimizer state are theirs alone, the weights the whole model's plus theirs, and the bfloat16 base
// holds the stacks' Linear weights in half the bytes.
TEST(PlannerLora, TheFrozenBaseHasNoGradientAndNoOptimizerState) {
  auto config = model::pegasus_shape("small");
  config.vocab_size = 8000;
  model::LoraConfig lora;
  lora.r = 16;
  lora.target_modules = {"all-linear"};
  const auto full = model::count_parameters(config);
  const auto fp32 = memory::lora_memory(config, lora, false);
  const auto bf16 = memory::lora_memory(config, lora, true);
  // Per Linear (d_model 512, ffn 2048): r (in + out); 6 encoder layers of 4 + 2, 6 decoder layers of 8 + 2.
  const std::int64_t attention = 16 * (512 + 512), ffn = 2 * 16 * (512 + 2048);
  EXPECT_EQ(fp32.counts.trainable, 6 * (4 * attention + ffn) + 6 * (8 * attention + ffn));
  EXPECT_EQ(fp32.weight_bytes, 4 * static_cast<std::uint64_t>(full.total() + fp32.counts.trainable));
  // The stacks' Linear weights: 6 x (4 d^2 + 2 d f) + 6 x (8 d^2 + 2 d f), 2 bytes fewer each.
  const std::int64_t linear = 6 * (4 * 512 * 512 + 2 * 512 * 2048) + 6 * (8 * 512 * 512 + 2 * 512 * 2048);
  EXPECT_EQ(bf16.weight_bytes, fp32.weight_bytes - 2 * static_cast<std::uint64_t>(linear));
  const auto state = memory::static_training_memory(fp32.counts, optim::OptimizerType::adamw_torch,
                                                    memory::StorageDtype::fp32);
  EXPECT_EQ(state.gradients + state.optimizer_state, 12 * static_cast<std::uint64_t>(fp32.counts.trainable));
}

void expect_within_ten_percent_and_not_under_the_margin(const std::vector<GridCell>& cells) {
  for (const auto& c : cells) {
    const auto what = c.model + " micro-batch " + std::to_string(c.knobs.micro_batch) + " source " +
                      std::to_string(c.source) + " checkpointed " + std::to_string(c.knobs.encoder_checkpointed) +
                      "+" + std::to_string(c.knobs.decoder_checkpointed) + " " + optim::to_string(c.knobs.optimizer) +
                      ": predicted " + std::to_string(c.predicted) + ", measured " + std::to_string(c.measured);
    EXPECT_LE(std::abs(c.error()), 0.10) << what;
    EXPECT_GE(c.error(), -memory::kPlanMargin) << what;
  }
}

// The grid's LoRA cells for one layout: rank 16 on every Linear (float32 base) at micro-batch 1 and 4, checkpointing
// none, the bottom encoder layer, the bottom decoder layer and all, both optimizers (16 cells); the same with the base
// in bfloat16 (none and all, Adafactor: 4 cells); rank 8 on the family's default targets with a bfloat16 base (none
// and all, AdamW: 4 cells).
void expect_lora_cells_within_ten_percent(const GridModel& base) {
  const auto adamw = optim::OptimizerType::adamw_torch, adafactor = optim::OptimizerType::adafactor;
  std::vector<GridCell> cells;
  run_grid(with_lora(base, 16, {"all-linear"}, false), {1, 4}, {128}, 32,
           {kNone, GridCheckpointing{1, 0}, GridCheckpointing{0, 1}, kEvery}, {adamw, adafactor}, cells);
  run_grid(with_lora(base, 16, {"all-linear"}, true), {1, 4}, {128}, 32, {kNone, kEvery}, {adafactor}, cells);
  run_grid(with_lora(base, 8, {}, true), {1, 4}, {128}, 32, {kNone, kEvery}, {adamw}, cells);
  print_grid(cells);
  ASSERT_EQ(cells.size(), 24u);
  expect_within_ten_percent_and_not_under_the_margin(cells);
}

TEST(PlannerLora, PredictedPeakWithinTenPercentOnLoraCellsForPegasus) {
  expect_lora_cells_within_ten_percent(grid_model_small());
}

TEST(PlannerLora, PredictedPeakWithinTenPercentOnLoraCellsForT5) {
  expect_lora_cells_within_ten_percent(grid_model_t5_small());
  expect_lora_cells_within_ten_percent(grid_model_flan_t5_small());
}

// T5 at 512 source tokens with a plain layer above a checkpointed one (the position-bias mask's gradient, the
// `_mixed` terms): with adapters the frozen layers still pass that gradient down.
TEST(PlannerLora, PlainT5LayerAboveACheckpointedOneWithAdapters) {
  std::vector<GridCell> cells;
  run_grid(with_lora(grid_model_t5_small(), 16, {"all-linear"}, false), {1, 4}, {512}, 64,
           {GridCheckpointing{1, 0}, GridCheckpointing{0, 1}}, {optim::OptimizerType::adafactor}, cells);
  print_grid(cells);
  ASSERT_EQ(cells.size(), 4u);
  expect_within_ten_percent_and_not_under_the_margin(cells);
}

// ---- The refusal names a LoRA configuration (fit.h step 5) ----

// About 9.5M parameters (8000 tokens, d_model 256, 4 + 4 layers): 36 MiB of float32 weights, of which the stacks'
// Linear weights are 28 MiB; full fine-tuning's weights and gradients alone take 72 MiB.
model::ModelConfig suggestion_model() {
  return make_grid_model({"d256-L4",
                          "vocab_size=8000,d_model=256,encoder_layers=4,decoder_layers=4,encoder_ffn_dim=1024,"
                          "decoder_ffn_dim=1024,encoder_attention_heads=8,decoder_attention_heads=8"})
      ->config();
}

memory::FitRequest suggestion_request(std::uint64_t budget) {
  memory::FitRequest request;
  request.budget = budget;
  request.worst = {1, 40, 12};
  request.effective_batch = 2;
  return request;
}

memory::FitResult plan_for(const model::ModelConfig& config, const memory::FitRequest& request) {
  return memory::fit_training(config, torch::Device(torch::kCPU), request);
}

constexpr std::uint64_t kMiB = 1024 * 1024;

TEST(PlannerLora, ARefusalNamesTheFirstLoraConfigurationThatFitsAndItsPeak) {
  const auto config = suggestion_model();
  const auto request = suggestion_request(60 * kMiB);
  const auto refused = plan_for(config, request);
  ASSERT_EQ(refused.status, memory::FitStatus::nothing_fits) << refused.explanation;
  EXPECT_FALSE(refused.chosen);  // never switched to by itself
  ASSERT_TRUE(refused.lora_suggestion) << refused.explanation;
  const auto& s = *refused.lora_suggestion;
  EXPECT_EQ(s.rung.lora.r, 16);
  EXPECT_EQ(s.rung.lora.target_modules, std::vector<std::string>{"all-linear"});
  EXPECT_FALSE(s.rung.base_bfloat16);
  EXPECT_EQ(s.arguments, "--lora_r 16 --lora_target_modules all-linear");
  EXPECT_LE(memory::with_margin(s.plan.prediction.peak, memory::kPlanMargin), request.budget);
  EXPECT_NE(refused.explanation.find("Full fine-tuning needs at least " + util::format_bytes(refused.minimum_budget) +
                                     "; --lora_r 16 --lora_target_modules all-linear fits in " +
                                     util::format_bytes(s.plan.prediction.peak)),
            std::string::npos)
      << refused.explanation;
  // Planned with those flags, the run fits, at the peak the refusal named.
  auto lora = request;
  lora.lora = s.rung.lora;
  const auto planned = plan_for(config, lora);
  ASSERT_EQ(planned.status, memory::FitStatus::fits) << planned.explanation;
  EXPECT_EQ(planned.chosen->prediction.weights, s.plan.prediction.weights);
  EXPECT_EQ(planned.chosen->prediction.gradients, s.plan.prediction.gradients);
  EXPECT_EQ(planned.chosen->prediction.optimizer_state, s.plan.prediction.optimizer_state);
}

TEST(PlannerLora, TheLadderHoldsTheBaseInBfloat16WhenFloat32DoesNotFit) {
  const auto refused = plan_for(suggestion_model(), suggestion_request(34 * kMiB));
  ASSERT_EQ(refused.status, memory::FitStatus::nothing_fits) << refused.explanation;
  ASSERT_TRUE(refused.lora_suggestion) << refused.explanation;
  EXPECT_EQ(refused.lora_suggestion->arguments, "--lora_r 16 --lora_target_modules all-linear --base_dtype bfloat16");
  EXPECT_NE(refused.explanation.find("--lora_r 16 --lora_target_modules all-linear --base_dtype bfloat16 fits in"),
            std::string::npos)
      << refused.explanation;
}

TEST(PlannerLora, TheRefusalSaysSoWhenNoLoraConfigurationFits) {
  const auto refused = plan_for(suggestion_model(), suggestion_request(16 * kMiB));
  ASSERT_EQ(refused.status, memory::FitStatus::nothing_fits) << refused.explanation;
  EXPECT_FALSE(refused.lora_suggestion);
  // Below the bfloat16 base's weights alone: refused before any probe, naming the first of the cheapest rungs.
  EXPECT_NE(refused.explanation.find("No LoRA configuration fits either: the cheapest tried, --lora_r 16 "
                                     "--lora_target_modules all-linear --base_dtype bfloat16, needs "),
            std::string::npos)
      << refused.explanation;
}

// Where full fine-tuning fits, or fits with other knobs than the ones fixed, nothing about LoRA is said.
TEST(PlannerLora, NoSuggestionWhereFullFineTuningFits) {
  const auto config = suggestion_model();
  const auto fits = plan_for(config, suggestion_request(400 * kMiB));
  ASSERT_EQ(fits.status, memory::FitStatus::fits) << fits.explanation;
  EXPECT_FALSE(fits.lora_suggestion);
  EXPECT_FALSE(fits.calibration->lora.enabled());
  auto fixed = suggestion_request(85 * kMiB);
  fixed.optimizer = optim::OptimizerType::adamw_torch;
  fixed.optimizer_policy = memory::OptimizerPolicy::fixed;
  const auto other_knobs = plan_for(config, fixed);
  EXPECT_EQ(other_knobs.status, memory::FitStatus::settings_too_large) << other_knobs.explanation;
  EXPECT_FALSE(other_knobs.lora_suggestion);
  EXPECT_EQ(other_knobs.explanation.find("lora"), std::string::npos) << other_knobs.explanation;
}

}  // namespace
}  // namespace fitsum::test
