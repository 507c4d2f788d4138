// Evaluation's memory model (memory/evaluation_memory.h) against the tracking allocator: each phase (the encoder
// pass, the loss pass, generation with and without the cache, greedy and beam, fp32 and bf16) is run on a random
// model and its peak above the resident memory compared with the prediction, on whichever LibTorch it is built
// against (1.13's math attention, 2.x's fused kernels).
#include <cstdio>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/generate/generate.h"
#include "fitsum/generate/step_decoder.h"
#include "fitsum/memory/evaluation_memory.h"
#include "fitsum/memory/planner.h"
#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/train/evaluation.h"
#include "fitsum/util/torch_compat.h"
#include "planner_grid.h"

namespace fitsum::test {
namespace {

struct Phase {
  const char* name;
  std::uint64_t predicted = 0;
  std::uint64_t measured = 0;
  double error() const {
    return (static_cast<double>(predicted) - static_cast<double>(measured)) / static_cast<double>(measured);
  }
};

// Peak bytes above what was allocated before `run`.
template <typename Run>
std::uint64_t measure(Run&& run) {
  auto& allocator = memory::TrackingCpuAllocator::instance();
  const auto before = allocator.current_bytes();
  allocator.reset_peak();
  run();
  return static_cast<std::uint64_t>(allocator.peak_bytes() - before);
}

std::pair<torch::Tensor, torch::Tensor> sources(std::int64_t batch, std::int64_t length, std::int64_t vocab) {
  auto ids = torch::randint(2, vocab, {batch, length}, torch::kLong);
  ids.select(1, length - 1).fill_(1);
  return {ids, torch::ones({batch, length}, torch::kLong)};
}

std::vector<Phase> measure_phases(model::Seq2SeqLM& model, const memory::EvaluationLoad& load) {
  torch::manual_seed(3);
  const auto& config = model->config();
  const auto predicted = memory::predict_evaluation(config, load);
  // Named tensors, not a structured binding: the lambdas below capture them (C++17 clang refuses bindings there).
  const auto inputs = sources(load.batch, load.source_length, config.vocab_size);
  const auto& ids = inputs.first;
  const auto& mask = inputs.second;
  std::vector<Phase> phases;
  // Each phase runs in its own autocast region, as evaluation does.
  phases.push_back({"encoder", predicted.encoder, measure([&] {
                      generate::EvalModeGuard eval(*model);
                      util::AutocastGuard autocast(c10::DeviceType::CPU, torch::kBFloat16, load.bf16);
                      auto hidden = model->encode(ids, mask);
                    })});
  if (load.compute_loss) {
    auto examples = fixed_length_examples(load.batch, load.source_length, load.target_length, config.vocab_size);
    train::EvaluationOptions options;
    options.batch_size = load.batch;
    options.bf16 = load.bf16;
    phases.push_back({"loss", predicted.loss, measure([&] {
                        train::evaluation_loss(*model, examples, options, c10::Device(c10::kCPU));
                      })});
  }
  if (load.generate) {
    generate::GenerationOptions options;
    options.num_beams = load.num_beams;
    options.max_length = load.max_length;
    options.min_length = load.max_length;  // eos is banned until the last position: every step runs
    options.use_cache = load.use_cache;
    phases.push_back({"generation", predicted.generation, measure([&] {
                        util::AutocastGuard autocast(c10::DeviceType::CPU, torch::kBFloat16, load.bf16);
                        generate::generate(*model, ids, mask, options);
                      })});
  }
  return phases;
}

struct Case {
  GridModel model;
  memory::EvaluationLoad load;
};

std::string describe(const Case& c) {
  char text[256];
  std::snprintf(text, sizeof text, "%s batch %lld beams %lld S %lld T %lld max_length %lld%s%s", c.model.name.c_str(),
                static_cast<long long>(c.load.batch), static_cast<long long>(c.load.num_beams),
                static_cast<long long>(c.load.source_length), static_cast<long long>(c.load.target_length),
                static_cast<long long>(c.load.max_length), c.load.use_cache ? "" : " no cache",
                c.load.bf16 ? " bf16" : "");
  return text;
}

memory::EvaluationLoad load_of(std::int64_t batch, std::int64_t beams, std::int64_t source, std::int64_t target,
                               std::int64_t max_length, bool use_cache = true, bool bf16 = false) {
  memory::EvaluationLoad l;
  l.batch = batch;
  l.num_beams = beams;
  l.source_length = source;
  l.target_length = target;
  l.max_length = max_length;
  l.use_cache = use_cache;
  l.bf16 = bf16;
  return l;
}

void expect_phases_within_ten_percent(const std::vector<Case>& cases);

// Every phase, and so evaluation's peak, is predicted within 10% and never below by more than the planner's margin:
// PEGASUS, BART's post-LayerNorm layout and T5 v1.0 / v1.1 (position-bias masks, gated feed-forward), fp32 and bf16.
TEST(EvaluationMemory, EveryPhaseMeasuredAgainstTheTrackingAllocator) {
  const std::vector<Case> cases = {
      {grid_model_large(), load_of(4, 4, 128, 32, 24)},
      {grid_model_large(), load_of(2, 1, 256, 64, 48)},
      {grid_model_large(), load_of(3, 4, 64, 16, 16, /*use_cache=*/false)},
      {grid_model_large(), load_of(4, 4, 128, 32, 24, true, /*bf16=*/true)},
      {grid_model_real_vocab(), load_of(2, 8, 128, 32, 32)},
      {grid_model_real_vocab(), load_of(4, 2, 256, 64, 16)},
      {grid_model_large_shaped(), load_of(1, 4, 512, 64, 12)},  // pegasus-large's widths: the cache dominates
      {grid_model_t5_small(), load_of(4, 4, 128, 32, 24)},
      {grid_model_t5_small(), load_of(4, 4, 128, 32, 24, true, /*bf16=*/true)},
      {grid_model_bart_small(), load_of(4, 4, 128, 32, 24)},
      {grid_model_bart_small(), load_of(4, 4, 128, 32, 24, true, /*bf16=*/true)},
      {grid_model_flan_t5_small(), load_of(2, 4, 256, 64, 24, /*use_cache=*/false)},
      {grid_model_flan_t5_small(), load_of(2, 4, 256, 64, 24, true, /*bf16=*/true)},
  };
  expect_phases_within_ten_percent(cases);
}

// The long-input encoders: block-local attention with global tokens (PEGASUS-X, staggered every other layer, no
// attention biases, no final_logits_bias) and transient-global attention (LongT5, the first block's position bias
// held by the stack), at a source length that is not a multiple of the blocks; their scores grow with the source,
// not its square, so a full-attention count overshoots them.
TEST(EvaluationMemory, LongInputEncodersMeasuredAgainstTheTrackingAllocator) {
  const std::vector<Case> cases = {
      {grid_model_pegasus_x_small(), load_of(2, 2, 1500, 32, 8)},
      {grid_model_pegasus_x_small(), load_of(1, 1, 4096, 16, 4, /*use_cache=*/false)},
      {grid_model_long_t5_small(), load_of(2, 2, 1500, 32, 8)},
      {grid_model_long_t5_small(), load_of(1, 1, 4096, 16, 4, /*use_cache=*/false)},
  };
  expect_phases_within_ten_percent(cases);
}

void expect_phases_within_ten_percent(const std::vector<Case>& cases) {
  std::printf("| case | phase | predicted MiB | measured MiB | error |\n|---|---|---|---|---|\n");
  for (const auto& c : cases) {
    auto model = make_grid_model(c.model);
    const auto phases = measure_phases(model, c.load);
    const auto predicted_peak = memory::predict_evaluation(model->config(), c.load).peak();
    std::uint64_t measured_peak = 0;
    for (const auto& p : phases) {
      std::printf("| %s | %s | %.2f | %.2f | %+.2f%% |\n", describe(c).c_str(), p.name, p.predicted / 1048576.0,
                  p.measured / 1048576.0, 100.0 * p.error());
      measured_peak = std::max(measured_peak, p.measured);
      EXPECT_LE(std::abs(p.error()), 0.10) << describe(c) << " " << p.name;
      EXPECT_GE(p.error(), -memory::kPlanMargin) << describe(c) << " " << p.name;
    }
    std::fflush(stdout);
    const double error = (static_cast<double>(predicted_peak) - static_cast<double>(measured_peak)) /
                         static_cast<double>(measured_peak);
    EXPECT_LE(std::abs(error), 0.10) << describe(c) << ": predicted peak " << predicted_peak << ", measured "
                                     << measured_peak;
    EXPECT_GE(error, -memory::kPlanMargin) << describe(c);
  }
}

TEST(EvaluationMemory, LargestBatchIsTheLargestThatFits) {
  const auto config = model::pegasus_shape("large");
  auto load = load_of(8, 8, 512, 128, 128);
  const auto full = memory::predict_evaluation(config, load).peak();
  // pegasus-large, 8 x 8 beams over 512 source tokens: the cross-attention cache, shared by each source's beams, is
  // 2 x 16 layers x 8 sources x 512 x 1024 x 4 bytes = 512 MiB; the self-attention cache 2 x 16 x 64 rows x 127
  // positions x 1024 x 4 bytes = 1016 MiB.
  EXPECT_EQ(memory::predict_evaluation(config, load).cache, (512ull << 20) + (1016ull << 20));
  EXPECT_EQ(memory::largest_evaluation_batch(config, load, full), 8);
  EXPECT_EQ(memory::largest_evaluation_batch(config, load, full - 1), 7);
  auto half = load;
  half.batch = 4;
  const auto four = memory::predict_evaluation(config, half).peak();
  EXPECT_EQ(memory::largest_evaluation_batch(config, load, four), 4);
  half.batch = 1;
  EXPECT_EQ(memory::largest_evaluation_batch(config, load, memory::predict_evaluation(config, half).peak() - 1), 0);
}

}  // namespace
}  // namespace fitsum::test
