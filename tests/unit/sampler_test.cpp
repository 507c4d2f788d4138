// Seeded example orders: pinned values (so that an order is the same on every platform and compiler), HF's
// length grouping, the micro-batch-independent step plan and the token-budget batcher.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "fitsum/data/sampler.h"

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

// Lengths with ties, to exercise the stable sorts.
const std::vector<std::size_t> kLengths = {5, 17, 3, 9, 9, 12, 1, 30, 7, 7, 22, 4, 9, 16, 2, 8, 30, 11, 6, 10};

TEST(Sampler, SplitMix64MatchesTheReferenceSequence) {
  SplitMix64 generator(0);  // the published first outputs of splitmix64 seeded with 0
  EXPECT_EQ(generator.next(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(generator.next(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(generator.next(), 0x06C45D188009454FULL);
  SplitMix64 bounded(1);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_LT(bounded.below(7), 7u);
  }
}

TEST(Sampler, ShuffledOrderDependsOnlyOnSeedAndEpoch) {
  // Pinned: computed by a separate Python transcription of splitmix64 + Fisher-Yates.
  EXPECT_EQ(shuffled_order(10, 42, 0), (Order{6, 1, 8, 7, 5, 4, 0, 2, 9, 3}));
  EXPECT_EQ(shuffled_order(10, 42, 1), (Order{0, 2, 7, 5, 9, 3, 1, 8, 4, 6}));
  EXPECT_EQ(shuffled_order(10, 7, 0), (Order{9, 1, 7, 8, 0, 4, 2, 5, 3, 6}));
  EXPECT_EQ(shuffled_order(1000, 3, 5), shuffled_order(1000, 3, 5));
  EXPECT_NE(shuffled_order(1000, 3, 5), shuffled_order(1000, 3, 6));
  EXPECT_TRUE(is_permutation_of_range(shuffled_order(1000, 3, 5)));
  EXPECT_TRUE(shuffled_order(0, 1, 1).empty());
}

TEST(Sampler, LengthGroupingFollowsHuggingFace) {
  // Expected: HF's get_length_grouped_indices (Python sorted(..., reverse=True) per mega-batch, argmax swap)
  // applied to the shuffled_order permutation in place of torch.randperm. Batch 2: mega-batches of 4.
  EXPECT_EQ(length_grouped_order(kLengths, 2, 42, 0),
            (Order{16, 1, 8, 0, 13, 18, 11, 2, 7, 10, 15, 9, 5, 17, 4, 12, 19, 3, 14, 6}));
  EXPECT_EQ(length_grouped_order(kLengths, 2, 42, 3),
            (Order{16, 1, 12, 8, 3, 15, 0, 11, 10, 13, 4, 9, 7, 17, 14, 6, 5, 19, 18, 2}));
  const Order order = length_grouped_order(kLengths, 3, 11, 2);
  EXPECT_TRUE(is_permutation_of_range(order));
  EXPECT_EQ(kLengths[order[0]], 30u);  // the longest example first
}

TEST(Sampler, StepsSeeTheSameExamplesWhateverTheMicroBatchSize) {
  for (const bool group_by_length : {false, true}) {
    SamplerOptions options;
    options.seed = 1234;
    options.group_by_length = group_by_length;
    options.examples_per_step = 4;  // 4 x 1 and 1 x 4 alike
    const Order order = epoch_order(kLengths, options, 7);
    const std::vector<StepBatches> big_micro_batches = plan_steps(order, 4, 1);
    const std::vector<StepBatches> accumulated = plan_steps(order, 1, 4);
    const std::vector<StepBatches> mixed = plan_steps(order, 2, 2);
    ASSERT_EQ(big_micro_batches.size(), 5u);
    ASSERT_EQ(accumulated.size(), 5u);
    ASSERT_EQ(mixed.size(), 5u);
    for (std::size_t step = 0; step < 5; ++step) {
      EXPECT_EQ(big_micro_batches[step].size(), 1u);
      EXPECT_EQ(accumulated[step].size(), 4u);
      EXPECT_EQ(flatten(accumulated[step]), flatten(big_micro_batches[step])) << "step " << step;
      EXPECT_EQ(flatten(mixed[step]), flatten(big_micro_batches[step])) << "step " << step;
    }
  }
}

TEST(Sampler, TheLastStepHoldsWhatIsLeft) {
  const Order order = shuffled_order(10, 5, 0);
  const std::vector<StepBatches> steps = plan_steps(order, 2, 2);
  ASSERT_EQ(steps.size(), 3u);
  ASSERT_EQ(steps[2].size(), 1u);
  EXPECT_EQ(steps[2][0], (Order{order[8], order[9]}));
  const std::vector<StepBatches> uneven = plan_steps(order, 3, 1);
  ASSERT_EQ(uneven.size(), 4u);
  EXPECT_EQ(uneven[3][0], (Order{order[9]}));
  EXPECT_THROW(plan_steps(order, 0, 1), std::invalid_argument);
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
