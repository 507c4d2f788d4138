// Activation checkpointing: with dropout on and the same seed, the gradients equal those of the plain run (the
// recompute replays the same dropout masks), the random stream afterwards is unchanged, and the measured peak
// memory is lower.
#include <gtest/gtest.h>

#include "fitsum/io/hf_config.h"
#include "fitsum/memory/tracking_allocator.h"
#include "fixture_support.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

struct StepResult {
  std::map<std::string, torch::Tensor> grads;
  double loss = 0.0;
  double next_random = 0.0;
  std::int64_t peak_bytes = 0;
};

model::ModelConfig dropout_config() {
  auto c = io::read_model_config(source_dir() / "tests" / "data" / "fixtures" / "odd-pegasus");
  c.dropout = 0.1;
  c.attention_dropout = 0.1;
  c.activation_dropout = 0.1;
  return c;
}

StepResult train_step(const model::ModelConfig& config, std::int64_t encoder_ckpt, std::int64_t decoder_ckpt,
                      std::int64_t batch, std::int64_t source_len, std::int64_t target_len,
                      bool freeze_embeds = false) {
  torch::manual_seed(7);
  model::Seq2SeqLM m(config);
  model::init_weights(*m, 3);
  if (freeze_embeds) m->model->shared->weight.set_requires_grad(false);
  m->train();
  m->set_gradient_checkpointing(encoder_ckpt, decoder_ckpt);
  auto ids = torch::randint(3, config.vocab_size, {batch, source_len}, torch::kLong);
  auto mask = torch::ones_like(ids);
  mask.narrow(1, source_len - 3, 3)[0].zero_();  // some padding
  auto labels = torch::randint(3, config.vocab_size, {batch, target_len}, torch::kLong);
  labels.narrow(1, target_len - 2, 2)[0].fill_(-100);

  auto& allocator = memory::TrackingCpuAllocator::instance();
  allocator.reset_peak();
  const auto before = allocator.current_bytes();
  auto out = m->forward(ids, mask, labels);
  out.loss.backward();
  StepResult r;
  r.peak_bytes = allocator.peak_bytes() - before;
  r.loss = out.loss.item<double>();
  for (const auto& item : m->named_parameters()) {
    if (item.value().grad().defined()) r.grads[item.key()] = item.value().grad().clone();
  }
  r.next_random = torch::rand({1}).item<double>();
  return r;
}

TEST(ActivationCheckpointing, SameGradientsWithDropout) {
  const auto config = dropout_config();
  const auto plain = train_step(config, 0, 0, 2, 12, 9);
  const auto ckpt = train_step(config, 100, 100, 2, 12, 9);
  const auto partial = train_step(config, 1, 1, 2, 12, 9);
  EXPECT_EQ(plain.loss, ckpt.loss);
  EXPECT_EQ(plain.next_random, ckpt.next_random);  // the step consumed the same random numbers
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (const auto& [name, g] : plain.grads) {
    for (const auto* other : {&ckpt, &partial}) {
      EXPECT_CLOSE(other->grads.at(name), g, relative(1e-6)) << name;
    }
  }
  // Dropout really is active: the same step without dropout gives another loss.
  auto no_dropout = config;
  no_dropout.dropout = no_dropout.attention_dropout = no_dropout.activation_dropout = 0.0;
  EXPECT_GT(std::abs(train_step(no_dropout, 0, 0, 2, 12, 9).loss - plain.loss), 1e-4);
}

// With the embedding frozen (--freeze_embeds, or a LoRA base) no input of the first checkpointed layer requires a
// gradient; its parameters, and every later checkpointed layer's, still get theirs.
TEST(ActivationCheckpointing, SameGradientsWhenNoInputRequiresOne) {
  const auto config = dropout_config();
  const auto plain = train_step(config, 0, 0, 2, 12, 9, true);
  const auto ckpt = train_step(config, 100, 100, 2, 12, 9, true);
  EXPECT_EQ(plain.grads.count("model.shared.weight"), 0u);
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (const auto& [name, g] : plain.grads) EXPECT_CLOSE(ckpt.grads.at(name), g, relative(1e-6)) << name;
}

TEST(ActivationCheckpointing, LowersMeasuredPeakMemory) {
  auto config = io::read_model_config(source_dir() / "configs" / "pegasus-tiny");
  config.vocab_size = 2000;  // keep the embedding small so activations dominate
  const auto plain = train_step(config, 0, 0, 4, 256, 64);
  const auto ckpt = train_step(config, 100, 100, 4, 256, 64);
  EXPECT_LT(ckpt.peak_bytes, plain.peak_bytes * 0.8)
      << "plain " << plain.peak_bytes << " checkpointed " << ckpt.peak_bytes;
  RecordProperty("peak_plain_bytes", std::to_string(plain.peak_bytes));
  RecordProperty("peak_checkpointed_bytes", std::to_string(ckpt.peak_bytes));
}

TEST(TrackingAllocator, CountsAndRefusesBeyondTheLimit) {
  auto& allocator = memory::TrackingCpuAllocator::instance();
  const auto base = allocator.current_bytes();
  {
    auto t = torch::empty({1024, 1024}, torch::kFloat);  // 4 MiB
    EXPECT_EQ(allocator.current_bytes() - base, 4 << 20);
    allocator.set_limit(allocator.current_bytes() + (1 << 20));
    EXPECT_THROW(torch::empty({1024, 1024}, torch::kFloat), c10::OutOfMemoryError);
    EXPECT_NO_THROW(torch::empty({128, 1024}, torch::kFloat));
    allocator.set_limit(0);
  }
  EXPECT_EQ(allocator.current_bytes(), base);
  auto again = torch::ones({16});  // the process carries on after the refusal
  EXPECT_EQ(again.sum().item<float>(), 16.0f);
}

}  // namespace
}  // namespace fitsum::test
