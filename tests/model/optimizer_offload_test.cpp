// --offload_optimizer cpu on the CPU build, where the device and the host are the same memory: the run is the
// on-device run bit for bit (weights, optimizer state, logged losses and norms), checkpoints resume across the two,
// and the device's measured peak leaves out the optimizer state, which the host's count holds.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "fitsum/io/safetensors.h"
#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/train/trainer.h"
#include "fixture_support.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

data::Example offload_example(std::int64_t source, std::int64_t labels, int i) {
  data::Example e;
  e.input_ids = std::vector<data::TokenId>(static_cast<std::size_t>(source), 105 + i % 10);
  e.input_ids.back() = 1;
  e.labels = std::vector<data::TokenId>(static_cast<std::size_t>(labels), 110 + (i * 7) % 17);
  e.labels->back() = 1;
  return e;
}

struct OffloadRun {
  std::vector<nlohmann::ordered_json> logs;
  std::map<std::string, torch::Tensor> weights;
  std::int64_t trainable_elements = 0;
  std::int64_t baseline = 0;  // the tracking allocator's device count before the model was loaded
  std::filesystem::path dir;
};

// Accumulation 2, clipping active (a small max_grad_norm), weight decay, dropout on: every path of the step.
train::TrainingArguments offload_args(const std::filesystem::path& dir, optim::OptimizerType optimizer,
                                      bool offload) {
  train::TrainingArguments args;
  args.output_dir = dir.string();
  args.max_steps = 3;
  args.per_device_train_batch_size = 2;
  args.gradient_accumulation_steps = 2;
  args.learning_rate = 1e-2;
  args.weight_decay = 0.1;
  args.max_grad_norm = 0.05;
  args.optim = optimizer;
  args.logging_steps = 1;
  args.save_strategy = train::IntervalStrategy::steps;
  args.save_steps = 1;
  if (offload) args.offload_optimizer = optim::OffloadDevice::cpu;
  return args;
}

OffloadRun train_run(const train::TrainingArguments& args) {
  OffloadRun run;
  run.dir = args.output_dir;
  run.baseline = memory::TrackingCpuAllocator::instance().current_bytes();
  train::TrainerInputs inputs;
  inputs.model = load_fixture_model(shared_dir() / "fixtures" / "tiny-pegasus", false);
  for (int i = 0; i < 12; ++i) inputs.train_examples.push_back(offload_example(12 + i % 5, 6 + i % 3, i));
  auto model = inputs.model;
  train::TrainerCallbacks callbacks;
  callbacks.on_log = [&run](const nlohmann::ordered_json& entry) { run.logs.push_back(entry); };
  train::Trainer trainer(args, std::move(inputs), callbacks);
  trainer.train();
  for (const auto& item : model->named_parameters()) {
    run.weights[item.key()] = item.value().detach().clone();
    if (item.value().requires_grad()) run.trainable_elements += item.value().numel();
  }
  return run;
}

std::map<std::string, torch::Tensor> optimizer_state(const std::filesystem::path& checkpoint) {
  io::SafetensorsReader reader(checkpoint / "optimizer.safetensors");
  std::map<std::string, torch::Tensor> out;
  for (const auto& e : reader.entries()) out[e.name] = reader.read(e.name);
  return out;
}

void expect_same_tensors(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b,
                         const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << what << " " << name;
    EXPECT_TRUE(torch::equal(t, b.at(name))) << what << " " << name << " differs";
  }
}

class OptimizerOffload : public ::testing::TestWithParam<optim::OptimizerType> {};

TEST_P(OptimizerOffload, IsTheOnDeviceRunBitForBit) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("offload-exact");
  const auto plain = train_run(offload_args(dir / "plain", GetParam(), false));
  const auto offloaded = train_run(offload_args(dir / "offloaded", GetParam(), true));
  expect_same_tensors(plain.weights, offloaded.weights, "weights");
  expect_same_tensors(optimizer_state(plain.dir / "checkpoint-3"), optimizer_state(offloaded.dir / "checkpoint-3"),
                      "optimizer state");
  ASSERT_EQ(plain.logs.size(), offloaded.logs.size());
  int steps = 0;
  for (std::size_t i = 0; i < plain.logs.size(); ++i) {
    if (!plain.logs[i].contains("grad_norm")) continue;
    ++steps;
    EXPECT_EQ(plain.logs[i]["loss"].get<double>(), offloaded.logs[i]["loss"].get<double>()) << i;
    EXPECT_EQ(plain.logs[i]["grad_norm"].get<double>(), offloaded.logs[i]["grad_norm"].get<double>()) << i;
    // Clipping was active, so the test covers the scaled update.
    EXPECT_GT(plain.logs[i]["grad_norm"].get<double>(), 0.05) << i;
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(plain.logs.back()["train_loss"].get<double>(), offloaded.logs.back()["train_loss"].get<double>());
}

// A checkpoint of either kind resumes under the other: the same optimizer.safetensors, the same continuation.
TEST_P(OptimizerOffload, CheckpointsResumeAcrossOffload) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("offload-resume");
  for (const bool first_offloaded : {false, true}) {
    SCOPED_TRACE(first_offloaded ? "offloaded run resumed on the device" : "on-device run resumed offloaded");
    const auto name = std::string(first_offloaded ? "from-offloaded" : "from-plain");
    auto first = offload_args(dir / name, GetParam(), first_offloaded);
    first.max_steps = 2;
    train_run(first);
    std::map<std::string, torch::Tensor> continued[2];
    for (const bool offload : {false, true}) {
      auto args = offload_args(dir / (name + (offload ? "-offloaded" : "-plain")), GetParam(), offload);
      args.max_steps = 4;
      args.save_strategy = train::IntervalStrategy::no;
      args.resume_from_checkpoint = (dir / name / "checkpoint-2").string();
      continued[offload ? 1 : 0] = train_run(args).weights;
    }
    expect_same_tensors(continued[0], continued[1], "resumed weights");
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, OptimizerOffload,
                         ::testing::Values(optim::OptimizerType::adamw_torch, optim::OptimizerType::adafactor),
                         [](const auto& info) { return std::string(optim::to_string(info.param)); });

// The device's peak of a step leaves out AdamW's two float32 moments (8 bytes a parameter); the host's count holds
// them beside its copies of the weights and gradients (16 bytes a parameter in all).
TEST(OptimizerOffloadMemory, DevicePeakLeavesOutTheOptimizerState) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("offload-memory");
  auto plain_args = offload_args(dir / "plain", optim::OptimizerType::adamw_torch, false);
  plain_args.save_strategy = train::IntervalStrategy::no;
  auto offloaded_args = offload_args(dir / "offloaded", optim::OptimizerType::adamw_torch, true);
  offloaded_args.save_strategy = train::IntervalStrategy::no;
  const auto plain = train_run(plain_args);
  const auto offloaded = train_run(offloaded_args);
  const double parameters = static_cast<double>(plain.trainable_elements);
  // Step 2's log: the optimizer state exists from step 1's update on, in both runs.
  const auto& p = plain.logs.at(1);
  const auto& o = offloaded.logs.at(1);
  ASSERT_EQ(p["step"].get<int>(), 2);
  // What each run added to the device's count: the earlier run's results are still held.
  const double saved = (p["peak_memory_bytes"].get<double>() - static_cast<double>(plain.baseline)) -
                       (o["peak_memory_bytes"].get<double>() - static_cast<double>(offloaded.baseline));
  EXPECT_NEAR(saved / parameters, 8.0, 0.4) << "device peak without offload " << p["peak_memory_bytes"]
                                            << " from " << plain.baseline << ", with " << o["peak_memory_bytes"] << " from " << offloaded.baseline << ", parameters " << parameters << ", host "
                                            << o.value("peak_host_memory_bytes", 0.0) << "; " << p.dump() << o.dump();
  EXPECT_FALSE(p.contains("peak_host_memory_bytes"));
  const double host = o["peak_host_memory_bytes"].get<double>();
  EXPECT_NEAR(host / parameters, 16.0, 0.4) << "host peak " << host;
}

}  // namespace
}  // namespace fitsum::test
