// The planner's offload knob (--offload_optimizer): an offloaded candidate keeps no optimizer state and no optimizer
// step transient on the device, holds them and the copies of the weights and gradients on the host (checked
// against --max_host_memory), and pays the copies each way in its step time; it is chosen only where it is the
// fastest candidate that fits.
#include <gtest/gtest.h>

#include "fitsum/memory/planner.h"
#include "fitsum/util/bytes.h"

namespace fitsum::test {
namespace {

// Round numbers for a 6 + 6 layer model of 1M parameters (4 MB of weights, 4 MB of gradients; AdamW's state 8 MB).
memory::Calibration offload_calibration() {
  memory::Calibration c;
  c.config = model::pegasus_shape("small");
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

// AdamW fixed, effective batch 8, 512 + 64 tokens, the optimizer offloaded where the planner chooses.
memory::PlanRequest offload_request(std::uint64_t budget, std::uint64_t host_budget) {
  memory::PlanRequest request;
  request.effective_batch = 8;
  request.source_length = 512;
  request.target_length = 64;
  request.optimizer = optim::OptimizerType::adamw_torch;
  request.optimizer_policy = memory::OptimizerPolicy::fixed;
  request.offload = memory::OffloadPolicy::free;
  request.budget = budget;
  request.host_budget = host_budget;
  return request;
}

TEST(PlannerOffload, ABudgetThatFitsOnlyWithOffloadGetsIt) {
  const auto c = offload_calibration();
  // 12 MB: AdamW's 16 MB of weights, gradients and state cannot fit the device; 8 MB of weights and gradients can.
  auto request = offload_request(12'000'000, 1'000'000'000);
  const auto plan = memory::choose_plan(c, request);
  ASSERT_TRUE(plan.chosen.has_value()) << plan.explanation;
  const auto& chosen = plan.candidates[*plan.chosen];
  EXPECT_TRUE(chosen.knobs.offload_optimizer);
  const auto& p = chosen.prediction;
  EXPECT_EQ(p.optimizer_state, 0u);
  EXPECT_EQ(p.optimizer_transient, 0u);
  EXPECT_EQ(p.peak, 8'000'000u + p.activations);
  // The host: AdamW's 8 MB of state, its 100 kB step transient, 4 MB of weights and 4 MB of gradients.
  EXPECT_EQ(p.host, 16'100'000u);
  EXPECT_EQ(p.transfer_bytes, 4'000'000u);
  EXPECT_DOUBLE_EQ(p.transfer_seconds, 8e6 / memory::kMemcpyBytesPerSecond);
  EXPECT_DOUBLE_EQ(p.host_update_seconds, 0.01);
  // The same knobs on the device: the step is slower by the copies exactly.
  auto on_device = chosen.knobs;
  on_device.offload_optimizer = false;
  const auto device = memory::predict(c, on_device, {1, 512, 64});
  EXPECT_DOUBLE_EQ(p.step_seconds, device.step_seconds + p.transfer_seconds);
  EXPECT_EQ(device.peak, p.peak + 8'000'000u);  // the state; the activations (over 1 MB) cover its transient
  EXPECT_NE(plan.explanation.find("the optimizer offloaded to the host"), std::string::npos) << plan.explanation;
  // On-device candidates were planned too, and none fits.
  bool any_on_device = false;
  for (const auto& k : plan.candidates) {
    if (k.knobs.offload_optimizer) continue;
    any_on_device = true;
    EXPECT_FALSE(k.fits);
  }
  EXPECT_TRUE(any_on_device);

  // Offloading costs time: with room on the device it is not chosen.
  request.budget = 60'000'000;
  const auto roomy = memory::choose_plan(c, request);
  ASSERT_TRUE(roomy.chosen.has_value());
  EXPECT_FALSE(roomy.candidates[*roomy.chosen].knobs.offload_optimizer);
  // Without the knob, nothing fits 12 MB.
  request.budget = 12'000'000;
  request.offload = memory::OffloadPolicy::none;
  EXPECT_FALSE(memory::choose_plan(c, request).chosen.has_value());
  // With offload fixed, every candidate offloads.
  request.offload = memory::OffloadPolicy::cpu;
  for (const auto& k : memory::choose_plan(c, request).candidates) EXPECT_TRUE(k.knobs.offload_optimizer);
}

TEST(PlannerOffload, TooLittleHostMemoryRefusesOffloadAndSaysSo) {
  const auto c = offload_calibration();
  const auto request = offload_request(12'000'000, 16'000'000);  // the host needs 16.1 MB, 16.905 MB with the margin
  const auto plan = memory::choose_plan(c, request);
  EXPECT_FALSE(plan.chosen.has_value());
  for (const auto& k : plan.candidates) {
    if (k.knobs.offload_optimizer) EXPECT_FALSE(k.host_fits);
  }
  EXPECT_NE(plan.explanation.find("max_host_memory"), std::string::npos) << plan.explanation;
  EXPECT_NE(plan.explanation.find(util::format_bytes(16'905'000)), std::string::npos) << plan.explanation;
  // Just enough host memory for it.
  EXPECT_TRUE(memory::choose_plan(c, offload_request(12'000'000, 16'905'000)).chosen.has_value());
}

TEST(PlannerOffload, CopiesOnCudaAreTimedAtPcieRates) {
  const auto c = offload_calibration();
  auto request = offload_request(12'000'000, 1'000'000'000);
  request.host_device_bytes_per_second = memory::kPcieBytesPerSecond;
  const auto plan = memory::choose_plan(c, request);
  ASSERT_TRUE(plan.chosen.has_value());
  EXPECT_DOUBLE_EQ(plan.candidates[*plan.chosen].prediction.transfer_seconds, 8e6 / 25e9);
}

}  // namespace
}  // namespace fitsum::test
