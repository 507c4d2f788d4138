// HF's training order: torch.randperm, transformers' LengthGroupedSampler and accelerate's BatchSamplerShard as
// their own code computes them (tests/data/hf_data_order.json, written by tests/data/make_sampler_fixture.py with
// the venv of make test-hf), the step plan, and the token-budget batcher.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include <nlohmann/json.hpp>

#include "fitsum/data/sampler.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::data {
namespace {

using Order = std::vector<std::size_t>;

bool is_permutation_of_range(Order order) {
  std::sort(order.begin(), order.end());
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i] != i) {
      return false;
    }
  }
  return true;
}

Order flatten(const StepBatches& step) {
  Order all;
  for (const auto& micro_batch : step) {
    all.insert(all.end(), micro_batch.begin(), micro_batch.end());
  }
  return all;
}

Order identity(std::size_t count) {
  Order order(count);
  std::iota(order.begin(), order.end(), std::size_t{0});
  return order;
}

// Lengths with ties, to exercise the stable sorts.
const std::vector<std::size_t> kLengths = {5, 17, 3, 9, 9, 12, 1, 30, 7, 7, 22, 4, 9, 16, 2, 8, 30, 11, 6, 10};

const nlohmann::json& hf_orders() {
  static const nlohmann::json file =
      util::read_json_file(test::source_dir() / "tests" / "data" / "hf_data_order.json");
  return file;
}

TEST(Sampler, RandpermIsPythonTorchsForTheSameSeed) {
  for (const auto& c : hf_orders()["randperm"]) {
    const auto count = c["count"].get<std::size_t>();
    const auto seed = c["seed"].get<std::uint64_t>();
    EXPECT_EQ(torch_randperm(count, seed), c["order"].get<Order>()) << "count " << count << ", seed " << seed;
  }
  EXPECT_TRUE(torch_randperm(0, 3).empty());
}

TEST(Sampler, ShufflingIsAcceleratesSeedableSamplerAtDataSeedPlusEpoch) {
  SamplerOptions options;
  options.seed = 5;        // set_seed's: no part in the shuffle
  options.data_seed = 42;  // --data_seed, or --seed when it is not given
  const std::vector<std::size_t> lengths(16, 3);
  for (const auto& c : hf_orders()["randperm"]) {
    if (c["count"] != 16 || (c["seed"] != 42 && c["seed"] != 43)) continue;
    const std::uint64_t epoch = c["seed"].get<std::uint64_t>() - 42;  // SeedableRandomSampler: seed + epoch
    EXPECT_EQ(epoch_order(lengths, options, epoch), c["order"].get<Order>()) << "epoch " << epoch;
  }
  options.seed = 6;
  EXPECT_EQ(epoch_order(lengths, options, 1), torch_randperm(16, 43));
}

TEST(Sampler, GroupByLengthIsTransformersOverTheReplayedGlobalGenerator) {
  const auto lengths = hf_orders()["lengths"].get<std::vector<std::size_t>>();
  for (const auto& c : hf_orders()["group_by_length"]) {
    SamplerOptions options;
    options.group_by_length = true;
    options.seed = c["seed"].get<std::uint64_t>();
    options.data_seed = options.seed + 1000;  // transformers' LengthGroupedSampler ignores data_seed
    options.batch_size = c["batch_size"].get<std::size_t>();
    const auto epoch = c["epoch"].get<std::uint64_t>();
    const auto want = c["order"].get<Order>();
    EXPECT_EQ(epoch_order(lengths, options, epoch), want)
        << "seed " << options.seed << ", batch " << options.batch_size << ", epoch " << epoch;
    // transformers groups by train_batch_size x gradient_accumulation_steps (per process): 1 x 2 is 2 x 1.
    if (options.batch_size == 2) {
      options.batch_size = 1;
      options.accumulation_steps = 2;
      options.processes = 3;
      EXPECT_EQ(epoch_order(lengths, options, epoch), want) << "batch 1 x accumulation 2, epoch " << epoch;
    }
  }
}

TEST(Sampler, LengthGroupingSortsMegaBatchesAndPutsTheLongestFirst) {
  // Batch 2: mega-batches of min(20 / (4 x 2), 50) = 2 batches, each sorted longest first (ties in order); the first
  // mega-batch holding the longest (30: examples 7 and 16) gives its first example to the front.
  const Order grouped = group_by_length(identity(20), kLengths, 2);
  EXPECT_EQ(grouped, (Order{7, 3, 0, 2, 1, 5, 4, 6, 10, 8, 9, 11, 13, 12, 15, 14, 16, 17, 19, 18}));
  EXPECT_TRUE(is_permutation_of_range(group_by_length(torch_randperm(20, 9), kLengths, 3)));
  EXPECT_THROW(group_by_length(identity(20), kLengths, 0), std::invalid_argument);
}

TEST(Sampler, ShardsAreAcceleratesBatchSamplerShard) {
  for (const auto& c : hf_orders()["shards"]) {
    SamplerOptions options;
    options.batch_size = c["batch_size"].get<std::size_t>();
    options.processes = c["processes"].get<std::size_t>();
    options.drop_last = c["drop_last"].get<bool>();
    const auto count = c["count"].get<std::size_t>();
    const auto steps = plan_epoch(identity(count), options);
    const auto& shards = c["batches"];
    const std::string what = "count " + std::to_string(count) + ", batch " + std::to_string(options.batch_size) +
                             ", processes " + std::to_string(options.processes) +
                             (options.drop_last ? ", drop_last" : "");
    ASSERT_EQ(steps.size(), shards[0].size()) << what;
    EXPECT_EQ(steps_per_epoch(count, options), steps.size()) << what;
    for (std::size_t k = 0; k < steps.size(); ++k) {
      ASSERT_EQ(steps[k].size(), options.processes) << what;
      for (std::size_t p = 0; p < options.processes; ++p) {
        EXPECT_EQ(steps[k][p], shards[p][k].get<Order>()) << what << ": batch " << k << " of process " << p;
      }
    }
  }
}

TEST(Sampler, EachProcessAccumulatesItsOwnBatches) {
  // 2 processes x accumulation 2, batch 2, 18 examples: 9 batches dealt 0,2,4,6,8 / 1,3,5,7 + one from the start;
  // process 0 accumulates its batches 0 and 2 in step 1, process 1 its batches 1 and 3.
  SamplerOptions options;
  options.batch_size = 2;
  options.accumulation_steps = 2;
  options.processes = 2;
  const auto steps = plan_epoch(identity(18), options);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0], (StepBatches{{0, 1}, {4, 5}, {2, 3}, {6, 7}}));
  EXPECT_EQ(steps[1], (StepBatches{{8, 9}, {12, 13}, {10, 11}, {14, 15}}));
  EXPECT_EQ(steps[2], (StepBatches{{16, 17}, {0, 1}}));  // the last round completed from the start
  EXPECT_EQ(steps_per_epoch(18, options), 3u);
}

TEST(Sampler, TheLastStepHoldsWhatIsLeftOrTheIncompleteBatchIsDropped) {
  const Order order = torch_randperm(10, 5);
  SamplerOptions options;
  options.batch_size = 2;
  options.accumulation_steps = 2;
  auto steps = plan_epoch(order, options);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[2], (StepBatches{{order[8], order[9]}}));
  options.batch_size = 3;
  options.accumulation_steps = 1;
  steps = plan_epoch(order, options);
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[3], (StepBatches{{order[9]}}));
  options.drop_last = true;
  steps = plan_epoch(order, options);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(flatten(steps[2]), (Order{order[6], order[7], order[8]}));
  EXPECT_EQ(steps_per_epoch(10, options), 3u);
  options.batch_size = 11;  // no complete batch at all
  EXPECT_THROW(plan_epoch(order, options), std::invalid_argument);
  options.batch_size = 0;
  EXPECT_THROW(plan_epoch(order, options), std::invalid_argument);
}

TEST(Sampler, AnEpochsOrderIsTheSameWhenComputedAgainForAResume) {
  // A resume in the middle of epoch 2 recomputes the epoch's order and continues at its next step.
  for (const bool group_by_length : {false, true}) {
    SamplerOptions options;
    options.group_by_length = group_by_length;
    options.seed = 1234;
    options.data_seed = 77;
    options.batch_size = 2;
    const auto order = epoch_order(kLengths, options, 2);
    EXPECT_EQ(epoch_order(kLengths, options, 2), order);
    EXPECT_NE(epoch_order(kLengths, options, 1), order);
    EXPECT_TRUE(is_permutation_of_range(order));
  }
}

TEST(Sampler, TokenBudgetBatchesStayWithinTheBudget) {
  TokenBudget budget;
  budget.max_tokens = 40;
  budget.pad_to_multiple_of = 4;
  const auto batches = token_budget_batches(kLengths, budget, 9, 0);
  Order seen;
  for (const auto& batch : batches) {
    ASSERT_FALSE(batch.empty());
    std::size_t longest = 0;
    for (const std::size_t index : batch) {
      longest = std::max(longest, (kLengths[index] + 3) / 4 * 4);
    }
    EXPECT_LE(batch.size() * longest, 40u);
    seen.insert(seen.end(), batch.begin(), batch.end());
  }
  EXPECT_EQ(seen.size(), kLengths.size());
  EXPECT_TRUE(is_permutation_of_range(seen));
  // Sorted by length and packed greedily: the short examples share batches (1,2,3,4 pad to 4; 5..8 to 8).
  EXPECT_LT(batches.size(), kLengths.size());
  EXPECT_EQ(token_budget_batches(kLengths, budget, 9, 0), batches);
  EXPECT_NE(token_budget_batches(kLengths, budget, 9, 1), batches);

  budget.max_examples = 2;
  for (const auto& batch : token_budget_batches(kLengths, budget, 9, 0)) {
    EXPECT_LE(batch.size(), 2u);
  }
  budget.max_tokens = 29;  // the two examples of 30 tokens fit nowhere
  EXPECT_THROW(token_budget_batches(kLengths, budget, 9, 0), std::invalid_argument);
}

TEST(Sampler, TokenBudgetPacksSortedLengthsGreedily) {
  // Four lengths, budget 20: sorted 3,4,6,9 -> {3,4,6} costs 3 x 6 = 18, adding 9 would cost 36.
  TokenBudget budget;
  budget.max_tokens = 20;
  auto batches = token_budget_batches({9, 3, 6, 4}, budget, 1, 0);
  std::sort(batches.begin(), batches.end(), [](const Order& a, const Order& b) { return a.size() > b.size(); });
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0], (Order{1, 3, 2}));
  EXPECT_EQ(batches[1], (Order{0}));
}

}  // namespace
}  // namespace fitsum::data
