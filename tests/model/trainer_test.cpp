// The Trainer as a library: an out-of-memory error that recovery cannot get around explains itself.
#include <gtest/gtest.h>

#include "fitsum/data/collator.h"
#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/train/trainer.h"
#include "fixture_support.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

TEST(Trainer, OutOfMemorySaysWhatHeldTheMemoryAndWhichKnobsHelp) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("oom");
  train::TrainingArguments args;
  args.output_dir = dir.string();
  args.max_steps = 2;
  args.per_device_train_batch_size = 4;
  args.save_strategy = train::IntervalStrategy::no;
  train::TrainerInputs inputs;
  inputs.model = load_fixture_model(shared_dir() / "fixtures" / "tiny-pegasus", false);
  for (int i = 0; i < 8; ++i) {
    data::Example e;
    e.input_ids = std::vector<data::TokenId>(40, 110 + i);
    e.input_ids.back() = 1;
    e.labels = std::vector<data::TokenId>(30, 120 + i);
    e.labels->back() = 1;
    inputs.train_examples.push_back(e);
  }
  train::Trainer trainer(args, std::move(inputs));
  auto& allocator = memory::TrackingCpuAllocator::instance();
  allocator.set_limit(allocator.current_bytes() + 200'000);  // far below what one step needs
  std::string message;
  try {
    trainer.train();
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  allocator.set_limit(0);
  EXPECT_NE(message.find("out of memory while training"), std::string::npos) << message;
  EXPECT_NE(message.find("weights"), std::string::npos) << message;
  EXPECT_NE(message.find("optimizer state"), std::string::npos) << message;
  // Recovery split the micro-batch down to one example and turned on full checkpointing before giving up.
  EXPECT_NE(message.find("even one example with gradient checkpointing of all layers does not fit"), std::string::npos)
      << message;
  EXPECT_NE(message.find("optim adafactor"), std::string::npos) << message;
}

// evaluate() runs the fused head + loss without gradients (the chunked plan): it must give HF's evaluation loss,
// each batch's mean token loss from full logits, weighted by the batch's examples.
TEST(Trainer, EvaluationLossEqualsFullLogitsLoss) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("eval");
  train::TrainingArguments args;
  args.output_dir = dir.string();
  args.max_steps = 1;
  args.per_device_eval_batch_size = 2;
  args.label_smoothing_factor = 0.1;
  train::TrainerInputs inputs;
  inputs.model = load_fixture_model(shared_dir() / "fixtures" / "tiny-pegasus", false);
  for (int i = 0; i < 5; ++i) {
    data::Example e;
    e.input_ids = std::vector<data::TokenId>(6 + i, 110 + i);
    e.input_ids.back() = 1;
    e.labels = std::vector<data::TokenId>(3 + 2 * i, 120 + i);
    e.labels->back() = 1;
    inputs.train_examples.push_back(e);
    inputs.eval_examples.push_back(e);
  }
  const auto eval_examples = inputs.eval_examples;
  auto model = inputs.model;
  train::Trainer trainer(args, std::move(inputs));
  const double fused = trainer.evaluate()["eval_loss"].get<double>();

  model->eval();
  torch::NoGradGuard no_grad;
  double weighted = 0.0;
  for (std::size_t start = 0; start < eval_examples.size(); start += 2) {
    std::vector<std::size_t> indices;
    for (std::size_t i = start; i < std::min(eval_examples.size(), start + 2); ++i) indices.push_back(i);
    const auto batch = data::collate(eval_examples, indices);
    auto hidden = model->decode(model->shift_tokens_right(batch.labels),
                                model->encode(batch.input_ids, batch.attention_mask), batch.attention_mask);
    const auto loss = model::label_loss_sum(model->lm_logits(hidden), batch.labels, 0.1);
    weighted += loss.sum.item<double>() / static_cast<double>(loss.tokens) * static_cast<double>(indices.size());
  }
  const double plain = weighted / static_cast<double>(eval_examples.size());
  EXPECT_CLOSE(fused, plain, relative(1e-5));
}

}  // namespace
}  // namespace fitsum::test
