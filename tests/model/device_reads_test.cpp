// A training step reads nothing back from the device (train/step_statistics.h, util/device_reads.h): the trainer
// reads its loss and gradient norm once per log (and at saves, evaluations and the end), the logged values are the
// very values a host reading every step would log, and a step that goes non-finite is still named.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "fitsum/data/collator.h"
#include "fitsum/model/micro_step.h"
#include "fitsum/optim/optimizers.h"
#include "fitsum/train/trainer.h"
#include "fitsum/util/device_reads.h"
#include "fixture_support.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

// `source` copies of token 110 + i and `labels` copies of 120 + i, each ended by eos.
data::Example uniform_example(std::int64_t source, std::int64_t labels, int i) {
  data::Example e;
  e.input_ids = std::vector<data::TokenId>(static_cast<std::size_t>(source), 110 + i);
  e.input_ids.back() = 1;
  e.labels = std::vector<data::TokenId>(static_cast<std::size_t>(labels), 120 + i);
  e.labels->back() = 1;
  return e;
}

struct Run {
  std::vector<nlohmann::ordered_json> logs;
  std::int64_t reads = 0;  // device reads during train()
  std::string error;
};

// 9 source and 7 label tokens: a step loss is the float32 sum over 7 tokens divided by 7 in float64, which float32
// cannot hold, so a sum kept in float32 anywhere would show in the logged bits.
Run train_one_example(train::TrainingArguments args, const std::string& name) {
  args.output_dir = (temp_dir(name) / "out").string();
  args.per_device_train_batch_size = 1;
  train::TrainerInputs inputs;
  inputs.model = load_fixture_model(shared_dir() / "fixtures" / "tiny-pegasus", false);
  inputs.train_examples.push_back(uniform_example(9, 7, 0));
  Run run;
  train::TrainerCallbacks callbacks;
  callbacks.on_log = [&](const nlohmann::ordered_json& entry) { run.logs.push_back(entry); };
  train::Trainer trainer(args, std::move(inputs), callbacks);
  const auto before = util::device_reads();
  try {
    trainer.train();
  } catch (const std::runtime_error& e) {
    run.error = e.what();
  }
  run.reads = util::device_reads() - before;
  return run;
}

train::TrainingArguments no_saves(std::int64_t max_steps, std::int64_t logging_steps) {
  train::TrainingArguments args;
  args.max_steps = max_steps;
  args.logging_steps = static_cast<double>(logging_steps);
  args.save_strategy = train::IntervalStrategy::no;
  return args;
}

TEST(DeviceReads, TheTrainerReadsTheDeviceOncePerLogNotPerStep) {
  FITSUM_REQUIRE_SHARED();
  // 6 steps logged every 2: the logs at 2, 4 and 6 read; the end finds nothing new to read.
  auto run = train_one_example(no_saves(6, 2), "reads-per-log");
  ASSERT_EQ(run.error, "");
  ASSERT_EQ(run.logs.size(), 4u);  // 3 training logs and the summary
  EXPECT_EQ(run.reads, 3);
  // 7 steps logged every 3: logs at 3, 6 and the last step 7.
  run = train_one_example(no_saves(7, 3), "reads-last");
  EXPECT_EQ(run.reads, 3);
  // A save that falls between logs reads too (its checkpoint holds the loss sums): logs at 2 and 4, saves at 3.
  auto args = no_saves(4, 2);
  args.save_strategy = train::IntervalStrategy::steps;
  args.save_steps = 3;
  run = train_one_example(args, "reads-save");
  EXPECT_EQ(run.reads, 3);
}

// The step losses and gradient norms, summed on the device, log what a host reading each one would log: the
// reference reads every micro-batch's loss and every step's norm (learning rate 0, so every step sees the same
// weights, and tiny-pegasus has no dropout).
TEST(DeviceReads, LoggedLossAndGradNormEqualHostReadsBitForBit) {
  FITSUM_REQUIRE_SHARED();
  auto args = no_saves(4, 2);
  args.learning_rate = 0.0;
  const auto run = train_one_example(args, "bits");
  ASSERT_EQ(run.error, "");
  ASSERT_EQ(run.logs.size(), 3u);

  auto model = load_fixture_model(shared_dir() / "fixtures" / "tiny-pegasus", false);
  model->train();
  const std::vector<data::Example> examples{uniform_example(9, 7, 0)};
  const auto batch = data::collate(examples, {0});
  const auto parameters = optim::trainable_parameters(*model);
  std::vector<torch::Tensor> list;
  for (const auto& [name, p] : parameters) list.push_back(p);
  const double denominator = 7.0;
  std::vector<double> losses, norms;
  for (int step = 0; step < 4; ++step) {
    model::MicroBatchOptions options;
    options.loss_scale = 1.0 / denominator;
    const auto loss = model::forward_backward(*model, batch.input_ids, batch.attention_mask, batch.labels, options);
    ASSERT_EQ(loss.tokens, 7);
    double loss_sum = 0.0;
    loss_sum += loss.sum.item<double>();
    losses.push_back(loss_sum / denominator);
    norms.push_back(optim::gradient_norm(list).item<double>());
    for (auto& p : list) p.mutable_grad().zero_();
  }
  double since_log = 0.0;
  since_log += losses[0];
  since_log += losses[1];
  EXPECT_EQ(run.logs[0]["loss"].get<double>(), since_log / 2.0);
  EXPECT_EQ(run.logs[0]["grad_norm"].get<double>(), norms[1]);
  double later = 0.0;
  later += losses[2];
  later += losses[3];
  EXPECT_EQ(run.logs[1]["loss"].get<double>(), later / 2.0);
  EXPECT_EQ(run.logs[1]["grad_norm"].get<double>(), norms[3]);
  EXPECT_NE(static_cast<double>(static_cast<float>(losses[0])), losses[0]);  // the premise above
  double total = 0.0;
  for (const double l : losses) total += l;
  EXPECT_EQ(run.logs[2]["train_loss"].get<double>(), total / 4.0);
}

// AdamW's first update moves every weight by about the learning rate: 1e30 makes step 2's forward overflow. Read
// only at the log of step 5, the run still stops naming step 2, and logs nothing.
TEST(DeviceReads, ADivergedRunIsStoppedAtTheReadNamingTheFirstNonFiniteStep) {
  FITSUM_REQUIRE_SHARED();
  auto args = no_saves(5, 5);
  args.learning_rate = 1e30;
  const auto run = train_one_example(args, "diverge");
  EXPECT_NE(run.error.find("training diverged at step 2: loss "), std::string::npos) << run.error;
  EXPECT_TRUE(run.logs.empty());
  EXPECT_EQ(run.reads, 1);
}

}  // namespace
}  // namespace fitsum::test
