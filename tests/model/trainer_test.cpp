// The Trainer as a library: an out-of-memory error that recovery cannot get around explains itself.
#include <gtest/gtest.h>

#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/train/trainer.h"
#include "fixture_support.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

TEST(Trainer, OutOfMemorySaysWhatHeldTheMemoryAndWhichKnobsHelp) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("oom");
  train::TrainingArguments args;
  args.output_dir = dir.string();
  args.max_steps = 2;
  args.per_device_train_batch_size = 4;
  args.save_strategy = "no";
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
  EXPECT_NE(message.find("even one example with gradient checkpointing of all layers does not fit"),
            std::string::npos) << message;
  EXPECT_NE(message.find("--optim adafactor"), std::string::npos) << message;
}

}  // namespace
}  // namespace fitsum::test
