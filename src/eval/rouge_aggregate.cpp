// Implements include/fitsum/eval/rouge_aggregate.h.
#include "fitsum/eval/rouge_aggregate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

namespace fitsum::eval {

namespace {

constexpr std::size_t kNumMeasures = 3;  // precision, recall, fmeasure

std::array<double, kNumMeasures> measures_of(const RougeScore& score) {
  return {score.precision, score.recall, score.fmeasure};
}

RougeScore score_of(const std::array<double, kNumMeasures>& measures) {
  return {measures[0], measures[1], measures[2]};
}

// Neumaier's compensated sum: the mean of a few thousand fractions comes out correctly rounded in practice, so it
// does not depend on the order of the records.
class CompensatedSum {
 public:
  void add(double value) {
    const double t = sum_ + value;
    if (std::abs(sum_) >= std::abs(value)) {
      compensation_ += (sum_ - t) + value;
    } else {
      compensation_ += (value - t) + sum_;
    }
    sum_ = t;
  }
  double value() const { return sum_ + compensation_; }

 private:
  double sum_ = 0.0;
  double compensation_ = 0.0;
};

// An index uniform in [0, n), by rejection so that no index is favoured; the same on every platform (unlike
// std::uniform_int_distribution, whose algorithm the standard leaves open).
std::size_t uniform_index(std::mt19937_64& generator, std::size_t n) {
  const std::uint64_t range = n;
  const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() -
                              std::numeric_limits<std::uint64_t>::max() % range;  // a multiple of range
  std::uint64_t draw = generator();
  while (draw >= limit) {
    draw = generator();
  }
  return static_cast<std::size_t>(draw % range);
}

void check_not_empty(const std::vector<RougeScores>& scores) {
  if (scores.empty()) {
    throw std::invalid_argument(
        "cannot aggregate ROUGE over zero records: the input holds no (prediction, "
        "reference) pairs");
  }
}

}  // namespace

RougeScores mean_rouge(const std::vector<RougeScores>& scores) {
  check_not_empty(scores);
  RougeScores mean;
  for (const RougeType type : kRougeTypes) {
    std::array<CompensatedSum, kNumMeasures> sums;
    for (const RougeScores& record : scores) {
      const auto measures = measures_of(record[type]);
      for (std::size_t k = 0; k < kNumMeasures; ++k) {
        sums[k].add(measures[k]);
      }
    }
    std::array<double, kNumMeasures> means{};
    for (std::size_t k = 0; k < kNumMeasures; ++k) {
      means[k] = sums[k].value() / static_cast<double>(scores.size());
    }
    mean[type] = score_of(means);
  }
  return mean;
}

double percentile_linear(const std::vector<double>& sorted_values, double q) {
  if (sorted_values.empty()) {
    throw std::invalid_argument("percentile of an empty list");
  }
  if (!(q >= 0.0 && q <= 100.0)) {
    throw std::invalid_argument("percentile must be in [0, 100], got " + std::to_string(q));
  }
  const double position = q / 100.0 * static_cast<double>(sorted_values.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(below + 1, sorted_values.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return sorted_values[below] + fraction * (sorted_values[above] - sorted_values[below]);
}

RougeInterval bootstrap_rouge(const std::vector<RougeScores>& scores, const BootstrapOptions& options) {
  check_not_empty(scores);
  if (options.n_samples <= 0) {
    throw std::invalid_argument("the number of bootstrap samples must be positive, got " +
                                std::to_string(options.n_samples));
  }
  if (!(options.confidence_interval >= 0.0 && options.confidence_interval <= 1.0)) {
    throw std::invalid_argument("the bootstrap confidence interval must be in [0, 1] (0.95 for 95%), got " +
                                std::to_string(options.confidence_interval));
  }
  const double tail = (1.0 - options.confidence_interval) / 2.0;
  const std::array<double, 3> percentiles = {100.0 * tail, 50.0, 100.0 * (1.0 - tail)};

  // rouge_score resamples each ROUGE type separately from one random stream; so does this.
  std::mt19937_64 generator(options.seed);
  const std::size_t n = scores.size();
  RougeInterval interval;
  for (const RougeType type : kRougeTypes) {
    std::array<std::vector<double>, kNumMeasures> sample_means;  // (measure, sample)
    for (auto& means : sample_means) {
      means.reserve(static_cast<std::size_t>(options.n_samples));
    }
    for (int sample = 0; sample < options.n_samples; ++sample) {
      std::array<double, kNumMeasures> sums{};
      for (std::size_t draw = 0; draw < n; ++draw) {
        const auto measures = measures_of(scores[uniform_index(generator, n)][type]);
        for (std::size_t k = 0; k < kNumMeasures; ++k) {
          sums[k] += measures[k];
        }
      }
      for (std::size_t k = 0; k < kNumMeasures; ++k) {
        sample_means[k].push_back(sums[k] / static_cast<double>(n));
      }
    }
    std::array<std::array<double, kNumMeasures>, 3> bounds{};  // (low/mid/high, measure)
    for (std::size_t k = 0; k < kNumMeasures; ++k) {
      std::sort(sample_means[k].begin(), sample_means[k].end());
      for (std::size_t b = 0; b < 3; ++b) {
        bounds[b][k] = percentile_linear(sample_means[k], percentiles[b]);
      }
    }
    interval.low[type] = score_of(bounds[0]);
    interval.mid[type] = score_of(bounds[1]);
    interval.high[type] = score_of(bounds[2]);
  }
  return interval;
}

}  // namespace fitsum::eval
