// Corpus aggregation: exact means, numpy's linear percentile, and the seeded bootstrap of rouge_score's
// BootstrapAggregator.
#include <gtest/gtest.h>

#include "fitsum/eval/rouge_aggregate.h"

namespace fitsum::eval {
namespace {

RougeScores uniform_scores(double precision, double recall, double fmeasure) {
  RougeScores scores;
  for (const RougeType type : kRougeTypes) {
    scores[type] = {precision, recall, fmeasure};
  }
  return scores;
}

TEST(RougeAggregate, MeanIsTheArithmeticMeanOfEachMeasure) {
  const std::vector<RougeScores> scores = {uniform_scores(0.1, 0.2, 0.3), uniform_scores(0.3, 0.4, 0.5),
                                           uniform_scores(0.2, 0.0, 1.0)};
  const RougeScores mean = mean_rouge(scores);
  for (const RougeType type : kRougeTypes) {
    EXPECT_NEAR(mean[type].precision, 0.2, 1e-15);
    EXPECT_NEAR(mean[type].recall, 0.2, 1e-15);
    EXPECT_NEAR(mean[type].fmeasure, 0.6, 1e-15);
  }
  EXPECT_THROW(mean_rouge({}), std::invalid_argument);
}

TEST(RougeAggregate, PercentileInterpolatesLinearlyLikeNumpy) {
  const std::vector<double> values = {1.0, 2.0, 3.0, 4.0};
  EXPECT_DOUBLE_EQ(percentile_linear(values, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(percentile_linear(values, 25.0), 1.75);  // numpy.percentile([1, 2, 3, 4], 25)
  EXPECT_DOUBLE_EQ(percentile_linear(values, 50.0), 2.5);
  EXPECT_DOUBLE_EQ(percentile_linear(values, 97.5), 3.925);
  EXPECT_DOUBLE_EQ(percentile_linear(values, 100.0), 4.0);
  EXPECT_DOUBLE_EQ(percentile_linear({7.0}, 2.5), 7.0);
  EXPECT_THROW(percentile_linear(values, 101.0), std::invalid_argument);
}

TEST(RougeAggregate, BootstrapOfConstantScoresIsThatScore) {
  const std::vector<RougeScores> scores(5, uniform_scores(0.25, 0.5, 0.75));
  const RougeInterval interval = bootstrap_rouge(scores, BootstrapOptions{});
  for (const RougeType type : kRougeTypes) {
    for (const RougeScores* bound : {&interval.low, &interval.mid, &interval.high}) {
      EXPECT_DOUBLE_EQ((*bound)[type].precision, 0.25);
      EXPECT_DOUBLE_EQ((*bound)[type].recall, 0.5);
      EXPECT_DOUBLE_EQ((*bound)[type].fmeasure, 0.75);
    }
  }
}

TEST(RougeAggregate, BootstrapIsSeededAndBracketsTheMean) {
  // 200 records whose rouge1 F alternates between 0 and 1 (mean 0.5, standard error 0.035).
  std::vector<RougeScores> scores;
  for (int i = 0; i < 200; ++i) {
    scores.push_back(uniform_scores(i % 2, i % 2, i % 2));
  }
  BootstrapOptions options;
  const RougeInterval first = bootstrap_rouge(scores, options);
  const RougeInterval again = bootstrap_rouge(scores, options);
  options.seed = 7;
  const RougeInterval other_seed = bootstrap_rouge(scores, options);
  const RougeScore& mid = first.mid[RougeType::kRouge1];
  EXPECT_EQ(mid.fmeasure, again.mid[RougeType::kRouge1].fmeasure);
  EXPECT_EQ(first.low[RougeType::kRougeLsum].recall, again.low[RougeType::kRougeLsum].recall);
  EXPECT_NE(first.low[RougeType::kRouge1].fmeasure, other_seed.low[RougeType::kRouge1].fmeasure);
  EXPECT_NEAR(mid.fmeasure, 0.5, 0.01);
  // The 95% interval of the mean is about 0.5 +- 1.96 * 0.035.
  EXPECT_NEAR(first.low[RougeType::kRouge1].fmeasure, 0.5 - 0.069, 0.02);
  EXPECT_NEAR(first.high[RougeType::kRouge1].fmeasure, 0.5 + 0.069, 0.02);
  EXPECT_LT(first.low[RougeType::kRouge1].fmeasure, mid.fmeasure);
  EXPECT_GT(first.high[RougeType::kRouge1].fmeasure, mid.fmeasure);
}

TEST(RougeAggregate, BootstrapRejectsInvalidOptions) {
  const std::vector<RougeScores> scores(3, uniform_scores(0.1, 0.1, 0.1));
  BootstrapOptions options;
  options.n_samples = 0;
  EXPECT_THROW(bootstrap_rouge(scores, options), std::invalid_argument);
  options = BootstrapOptions{};
  options.confidence_interval = 1.5;
  EXPECT_THROW(bootstrap_rouge(scores, options), std::invalid_argument);
  EXPECT_THROW(bootstrap_rouge({}, BootstrapOptions{}), std::invalid_argument);
}

}  // namespace
}  // namespace fitsum::eval
