// Corpus-level ROUGE from per-record scores, two ways:
//   mean_rouge       the exact arithmetic mean of each precision, recall and F over the records (the default of
//                    `fitsum rouge`; what the reference aggregates in this project are).
//   bootstrap_rouge  rouge_score's BootstrapAggregator, which Hugging Face `evaluate` reports as `mid`: draw
//                    n_samples resamples of the records with replacement, take each resample's mean, and report
//                    the percentiles (100 - c)/2, 50 and 100 - (100 - c)/2 of those means, each measure on its own,
//                    with numpy's default linear interpolation. `mid` is close to the mean but random; here it is
//                    seeded, using a 64-bit Mersenne Twister, so it repeats run to run but does not reproduce
//                    numpy's random draws.
#pragma once

#include <cstdint>
#include <vector>

#include "fitsum/eval/rouge.h"

namespace fitsum::eval {

struct BootstrapOptions {
  int n_samples = 1000;               // resamples, as rouge_score's default
  double confidence_interval = 0.95;  // low/high are its two-sided bounds
  std::uint64_t seed = 42;
};

struct RougeInterval {
  RougeScores low;
  RougeScores mid;
  RougeScores high;
};

// Exact means (compensated summation). Throws std::invalid_argument for an empty list.
RougeScores mean_rouge(const std::vector<RougeScores>& scores);

// rouge_score's bootstrap percentiles. Throws std::invalid_argument for an empty list or invalid options.
RougeInterval bootstrap_rouge(const std::vector<RougeScores>& scores, const BootstrapOptions& options);

// numpy.percentile(values, q) with the default 'linear' method, q in [0, 100]; `sorted_values` ascending and
// non-empty.
double percentile_linear(const std::vector<double>& sorted_values, double q);

}  // namespace fitsum::eval
