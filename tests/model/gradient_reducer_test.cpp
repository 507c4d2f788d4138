// The sums of the gradients over the processes (train/gradient_reducer.h), with two threads of this process standing
// for two processes (a real TCPStore rendezvous and Gloo), each with its own copy of the model: buckets are summed
// during the backward that finishes them; through the Trainer, ZeRO stages 0, 1 and 2 train the weights of one
// process (and, under stage 2, no process holds a gradient between steps); an out-of-memory error in the middle of
// one process's backward, after some buckets were summed, is redone by that process alone and changes nothing.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/optim/sharding.h"
#include "fitsum/train/distributed.h"
#include "fitsum/train/gradient_reducer.h"
#include "fitsum/train/trainer.h"
#include "planner_grid.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

struct Run {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::vector<std::string> messages;
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  std::size_t parameters_with_gradients = 0;  // after training
};

struct RunSetup {
  optim::OptimizerType optimizer = optim::OptimizerType::adafactor;
  std::int64_t accumulation = 2;
  int zero_stage = 2;
  double bucket_mb = 0.0625;  // 64 KiB: the d128 model's 128 x 128 matrices alone, biases and norms together
  std::int64_t steps = 3;
  std::int64_t failing_steps = 0;  // an out-of-memory error in the backward of steps 2 .. failing_steps + 1
  std::vector<std::int64_t> failing_backwards = {0};  // ... in these backwards of the step (0: its first, redos count)
};

// Steps of 8 examples (micro-batch 2) over 12 examples: every second step has 4, one micro-batch on each of two
// processes. `group` null: one process with twice the accumulation, whose steps hold the same examples (the batches
// of an epoch are dealt to two processes without a remainder, so accelerate's completion of the last round, which
// one process does not have, adds none: data/sampler.h).
Run train_steps(const RunSetup& setup, const std::shared_ptr<train::ProcessGroup>& group, const std::string& name) {
  Run run;
  auto grid = grid_model_small();
  // gelu, not relu: two processes sum the same micro-batches in another grouping than one process, and a rounding
  // difference must not flip a unit across relu's kink (as in the distributed integration tests).
  grid.overrides += ",dropout=0.0,attention_dropout=0.0,activation_dropout=0.0,activation_function=gelu";
  auto model = make_grid_model(grid);
  train::TrainingArguments args;
  args.output_dir = temp_dir("reducer-" + name).string();
  args.overwrite_output_dir = true;
  args.max_steps = setup.steps;
  args.logging_steps = 1;
  args.save_strategy = train::IntervalStrategy::no;
  args.optim = setup.optimizer;
  args.learning_rate = 1e-3;
  args.weight_decay = 0.01;
  args.max_grad_norm = 1.0;
  args.per_device_train_batch_size = 2;
  args.gradient_accumulation_steps = group ? setup.accumulation : 2 * setup.accumulation;
  args.zero_stage = setup.zero_stage;
  args.ddp_bucket_cap_mb = setup.bucket_mb;
  train::TrainerInputs inputs;
  inputs.model = model;
  inputs.train_examples = fixed_length_examples(12, 48, 16, model->config().vocab_size);
  inputs.process_group = group;
  train::TrainerCallbacks callbacks;
  callbacks.on_log = [&](const nlohmann::ordered_json& entry) {
    if (entry.contains("loss")) run.losses.push_back(entry["loss"].get<double>());
    if (entry.contains("grad_norm")) run.grad_norms.push_back(entry["grad_norm"].get<double>());
  };
  callbacks.on_message = [&](const std::string& m) { run.messages.push_back(m); };
  // Out of memory in the backward of the bottom encoder layer (once per step from the second): the backward's last
  // parameters, so the decoder's buckets are summed over the processes already.
  auto armed = std::make_shared<bool>(false);
  auto backwards = std::make_shared<std::int64_t>(0);  // in the step
  if (setup.failing_steps > 0) {
    model->named_parameters()["model.encoder.layers.0.fc1.weight"].register_hook(
        [armed, backwards, at = setup.failing_backwards](const torch::Tensor& grad) {
          if (*armed && std::find(at.begin(), at.end(), (*backwards)++) != at.end()) {
            *armed = *backwards <= at.back();
            TORCH_CHECK_WITH(OutOfMemoryError, false, "injected: out of memory during backward");
          }
          return grad;
        });
    callbacks.on_step = [armed, backwards, last = setup.failing_steps](std::int64_t step, std::int64_t) {
      *armed = step >= 1 && step <= last;
      *backwards = 0;
    };
  }
  train::Trainer trainer(args, std::move(inputs), callbacks);
  EXPECT_EQ(trainer.train().global_step, setup.steps);
  for (const auto& p : model->named_parameters()) {
    run.weights.emplace_back(p.key(), p.value().detach().clone());
    if (p.value().grad().defined()) run.parameters_with_gradients += 1;
  }
  return run;
}

// Both ranks, each on its own thread; rank 0's log is the job's.
std::vector<Run> train_two_processes(const RunSetup& setup, const std::vector<RunSetup>& per_rank = {}) {
  std::vector<Run> runs(2);
  const auto errors = on_two_ranks([&](int r, std::shared_ptr<train::ProcessGroup> group) {
    const auto& own = per_rank.empty() ? setup : per_rank[static_cast<std::size_t>(r)];
    runs[static_cast<std::size_t>(r)] = train_steps(own, group, "rank" + std::to_string(r));
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  return runs;
}

// The weights of two processes against one: process 0 accumulates batches 0 and 2 of a step and process 1 batches 1
// and 3 (accelerate's deal, data/sampler.h), so the gradient sums the same micro-batches grouped otherwise than one
// process's running sum. The rounding, carried by the optimizer's normalised updates, is largest relative to the
// tensors of smallest magnitude: at most 4.5e-6 of a tensor's largest weight on oneDNN's products, 1.1e-5 on
// OpenBLAS's Haswell kernels (a layer-norm bias whose largest entry is 2.4e-3); 1e-4 holds on either with a margin.
// Losses and gradient norms stay within 1e-5.
constexpr double kRegrouped = 1e-4;

void expect_same_training(const Run& reference, const Run& run, double weights_relative) {
  ASSERT_EQ(run.losses.size(), reference.losses.size());
  for (std::size_t i = 0; i < reference.losses.size(); ++i) {
    EXPECT_CLOSE(run.losses[i], reference.losses[i], relative(1e-5)) << "step " << i + 1;
    EXPECT_CLOSE(run.grad_norms[i], reference.grad_norms[i], relative(1e-5)) << "step " << i + 1;
  }
  ASSERT_EQ(run.weights.size(), reference.weights.size());
  for (std::size_t i = 0; i < reference.weights.size(); ++i) {
    const auto& [name, t] = reference.weights[i];
    // k_proj biases get no true gradient (softmax is shift-invariant), only rounding noise: not comparable.
    if (name.find("k_proj.bias") != std::string::npos) continue;
    EXPECT_CLOSE(run.weights[i].second, t, relative(weights_relative)) << name;
  }
}

// Every process ends with the same weights, bit for bit: they train one model.
void expect_one_model(const std::vector<Run>& ranks) {
  for (const auto& r : ranks) {
    ASSERT_EQ(r.weights.size(), ranks[0].weights.size());
    for (std::size_t i = 0; i < r.weights.size(); ++i) {
      EXPECT_TRUE(torch::equal(r.weights[i].second, ranks[0].weights[i].second)) << r.weights[i].first;
    }
  }
}

std::string messages_of(const Run& run) {
  std::string log;
  for (const auto& m : run.messages) log += m + "\n";
  return log;
}

TEST(ZeroStageTwo, TwoProcessesTrainTheWeightsOfOneAndHoldNoGradientBetweenSteps) {
  RunSetup setup;
  const auto one = train_steps(setup, nullptr, "one");
  const auto ranks = train_two_processes(setup);
  expect_same_training(one, ranks[0], kRegrouped);
  for (const auto& r : ranks) EXPECT_EQ(r.parameters_with_gradients, 0u);
  expect_one_model(ranks);
}

TEST(ZeroStageTwo, OutOfMemoryMidBackwardRedoesOneProcesssMicroBatchAlone) {
  RunSetup setup;
  const auto one = train_steps(setup, nullptr, "one-oom");
  auto failing = setup;
  failing.failing_steps = 1;
  const auto ranks = train_two_processes(setup, {setup, failing});
  const auto log = messages_of(ranks[1]);
  EXPECT_NE(log.find("out of memory in the backward of a micro-batch of 2 examples at step 2: split into 1 + 1, "
                     "redoing the micro-batch"),
            std::string::npos)
      << log;
  expect_same_training(one, ranks[0], kRegrouped);
  expect_one_model(ranks);
}

// Out of memory in four steps in a row on one process: it re-plans alone, to full checkpointing, then to half the
// micro-batch with twice the accumulation. Its sums stay one per micro-batch of the size both processes agreed on
// (each run in two parts), so the other process never notices, and the weights are still one process's.
TEST(ZeroStageTwo, OneProcessReplansAloneAfterRepeatedOutOfMemory) {
  RunSetup setup;
  setup.steps = 6;
  const auto one = train_steps(setup, nullptr, "one-replan");
  auto failing = setup;
  failing.failing_steps = 4;
  const auto ranks = train_two_processes(setup, {setup, failing});
  const auto log = messages_of(ranks[1]);
  EXPECT_NE(log.find("re-planned with gradient checkpointing of all layers"), std::string::npos) << log;
  EXPECT_NE(log.find("re-planned with per_device_train_batch_size 1 gradient_accumulation_steps 4"), std::string::npos)
      << log;
  expect_same_training(one, ranks[0], kRegrouped);
  expect_one_model(ranks);
}

class ZeroStagesZeroAndOne : public ::testing::TestWithParam<int> {};

// Every process keeps every gradient, summed in 64 KiB buckets during the backward of each process's last
// micro-batch of a step (every second step one micro-batch each).
TEST_P(ZeroStagesZeroAndOne, TwoProcessesTrainTheWeightsOfOne) {
  RunSetup setup;
  setup.zero_stage = GetParam();
  const auto one = train_steps(setup, nullptr, "one");
  const auto ranks = train_two_processes(setup);
  expect_same_training(one, ranks[0], kRegrouped);
  expect_one_model(ranks);
}

// Out of memory in the bottom encoder layer's backward of each process's micro-batch of step 2 (one of 2 examples),
// after the decoder's buckets were summed: rank 0 splits it; rank 1 too, and runs out of memory again in the redo's
// first backward, of one example, so it turns on full checkpointing; each redoes its step alone, dropping what the
// redo computes for the buckets already summed.
// The weights are compared right after that step: PEGASUS's relu makes the gradient jump where a pre-activation
// crosses zero, so a split's rounding may flip a unit and change the gradient of a later step beyond rounding.
TEST_P(ZeroStagesZeroAndOne, OutOfMemoryInTheLastBackwardRedoesTheStepOfOneProcessAlone) {
  RunSetup setup;
  setup.zero_stage = GetParam();
  setup.steps = 2;
  const auto one = train_steps(setup, nullptr, "one-oom");
  auto split = setup;
  split.failing_steps = 1;
  auto checkpoint = split;
  checkpoint.failing_backwards = {0, 1};
  const auto ranks = train_two_processes(setup, {split, checkpoint});
  const auto log0 = messages_of(ranks[0]);
  EXPECT_NE(log0.find("out of memory in the backward of a micro-batch of 2 examples at step 2: split into 1 + 1, "
                      "redoing the step"),
            std::string::npos)
      << log0;
  const auto log1 = messages_of(ranks[1]);
  EXPECT_NE(log1.find("out of memory in the backward of a micro-batch of 1 examples at step 2: one example cannot be "
                      "split; retrying with gradient checkpointing of all layers"),
            std::string::npos)
      << log1;
  expect_same_training(one, ranks[0], kRegrouped);
  expect_one_model(ranks);
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroStagesZeroAndOne, ::testing::Values(0, 1));

// Three 16 x 16 layers, one bucket each (weight and bias): by the time the backward reaches the first layer's weight
// in the unit's last backward, the buckets of the two layers above have been started; the sums equal both
// processes' gradients of both backwards, in .grad, which clear() zeroes.
TEST(GradientReducer, EveryProcessSumsEachBucketDuringTheBackwardThatFinishesIt) {
  const auto input = [](int rank, int backward) {
    return torch::linspace(-1.0, 1.0, 64).view({4, 16}) * static_cast<double>(1 + rank + 2 * backward);
  };
  const auto make = [] {
    torch::manual_seed(5);
    return torch::nn::Sequential(torch::nn::Linear(16, 16), torch::nn::Tanh(), torch::nn::Linear(16, 16),
                                 torch::nn::Tanh(), torch::nn::Linear(16, 16));
  };
  auto reference = make();
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 2; ++k) reference->forward(input(r, k)).pow(2).sum().backward();
  }
  std::vector<torch::nn::Sequential> models{make(), make()};
  std::vector<std::vector<std::size_t>> started(2);  // per rank: buckets started when the first layer's weight is done
  const auto errors = on_two_ranks([&](int r, std::shared_ptr<train::ProcessGroup> group) {
    auto& model = models[static_cast<std::size_t>(r)];
    std::vector<std::pair<std::string, torch::Tensor>> parameters;
    for (const auto& p : model->named_parameters()) parameters.emplace_back(p.key(), p.value());
    train::GradientReducer reducer(group, parameters, {}, 16 * 16 * 4 + 16 * 4);
    EXPECT_EQ(reducer.buckets(), 3u);
    model->named_parameters()["0.weight"].register_hook([&reducer, &started, r](const torch::Tensor& grad) {
      started[static_cast<std::size_t>(r)].push_back(reducer.buckets_started());
      return grad;
    });
    for (int k = 0; k < 2; ++k) {
      reducer.begin_backward(k == 1);
      model->forward(input(r, k)).pow(2).sum().backward();
      reducer.end_backward();
    }
    EXPECT_EQ(reducer.buckets_started(), 3u);
    for (const auto& [name, p] : parameters) {
      EXPECT_CLOSE(p.grad(), reference->named_parameters()[name].grad(), relative(1e-6)) << name;
    }
    reducer.clear();
    for (const auto& [name, p] : parameters) EXPECT_EQ(p.grad().abs().max().item<float>(), 0.0f) << name;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(started[static_cast<std::size_t>(r)], (std::vector<std::size_t>{0, 2})) << "rank " << r;
  }
}

TEST(ZeroStageTwo, PredictedGradientsAreTheShareAndWhatTheBackwardHolds) {
  // One process: every gradient. Four tensors of 1000, 600, 300, 100 float32 elements on two processes: the larger
  // share's sums (4000 bytes), and besides them the two largest tensors (6400) and two 64-byte buckets in flight.
  const std::vector<std::int64_t> elements = {1000, 600, 300, 100};
  EXPECT_EQ(optim::sharded_gradient_bytes(elements, 1, 64), 8000u);
  EXPECT_EQ(optim::sharded_gradient_bytes(elements, 2, 64), 4000u + 6400 + 128);
  // Buckets as large as the model: every gradient is in flight (8000), the share's sums come on top.
  EXPECT_EQ(optim::sharded_gradient_bytes(elements, 2, 8000), 4000u + 8000);
  // A 9000-element embedding and 16 tensors of 1000 (100 KB in all). Two processes: the embedding to rank 0, then
  // nine 1000s to rank 1 until the loads tie, the last seven alternating from rank 0: 13000 and 12000 elements.
  std::vector<std::int64_t> many(16, 1000);
  many.insert(many.begin(), 9000);
  EXPECT_EQ(optim::sharded_gradient_bytes(many, 2, 100), 52'000u + 36'000 + 4'000 + 200);
  // Four processes: {embedding}, then 16 x 1000 over the other three (6, 5, 5): the largest share is 36 KB.
  EXPECT_EQ(optim::sharded_gradient_bytes(many, 4, 100), 36'000u + 36'000 + 4'000 + 200);
}

// The packed copy of a bucket: the largest bucket of several tensors, filled from the last tensor back; a tensor alone
// in its bucket is summed in place (no copy).
TEST(ZeroStageTwo, LargestPackedBucketIsTheLargestBucketOfSeveralTensors) {
  const std::vector<std::int64_t> elements = {1000, 600, 300, 100};
  EXPECT_EQ(optim::largest_packed_bucket(elements, 64), 0u);                // every tensor alone
  EXPECT_EQ(optim::largest_packed_bucket(elements, 8000), 8000u);           // one bucket of all
  EXPECT_EQ(optim::largest_packed_bucket(elements, 4000), 4000u);           // {100, 300, 600}, then {1000} alone
  EXPECT_EQ(optim::largest_packed_bucket({10, 10, 10, 10, 10}, 80), 80u);  // {10, 10}, {10, 10}, {10}
}

}  // namespace
}  // namespace fitsum::test
