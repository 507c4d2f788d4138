// The order in which an epoch visits the examples, and how it is cut into batches.
//
// Every order depends only on (seed, epoch) and the example lengths, never on the micro-batch size: the trainer
// takes consecutive runs of `examples_per_step` examples for each optimizer step and splits them into
// micro-batches, so micro-batch 4 x 1 accumulation step and micro-batch 1 x 4 steps see the same examples.
// Randomness comes from splitmix64 and Fisher-Yates written out here (std::shuffle and the std distributions may
// differ between standard libraries), so an order is the same on every platform.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fitsum/data/dataset.h"

namespace fitsum::data {

// splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators", 2014): a 64-bit counter
// passed through a fixed mixing function.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  // Uniform in [0, bound), bound > 0, by rejection (no modulo bias).
  std::uint64_t below(std::uint64_t bound);

 private:
  std::uint64_t state_;
};

// The generator of one epoch; `stream` keeps different uses within an epoch apart.
SplitMix64 epoch_generator(std::uint64_t seed, std::uint64_t epoch, std::uint64_t stream = 0);

// Fisher-Yates shuffle of 0..count-1 (from the last position down, j = below(i + 1)).
std::vector<std::size_t> shuffled_order(std::size_t count, std::uint64_t seed, std::uint64_t epoch);

// HF's LengthGroupedSampler (trainer_pt_utils.get_length_grouped_indices): shuffle, cut into mega-batches of
// mega_batch_mult * batch_size examples (mult = min(count / (4 * batch_size), 50), at least 1), sort each
// mega-batch by length, longest first (stable), then swap the longest example of all to the very front so that
// an out-of-memory shows up at the first step. `batch_size` is the examples per optimizer step, as HF passes
// train_batch_size * gradient_accumulation_steps.
std::vector<std::size_t> length_grouped_order(const std::vector<std::size_t>& lengths, std::size_t batch_size,
                                              std::uint64_t seed, std::uint64_t epoch);

struct SamplerOptions {
  std::uint64_t seed = 42;            // --seed (HF's default)
  bool group_by_length = false;       // --group_by_length
  std::size_t examples_per_step = 1;  // micro-batch size x accumulation steps (x processes)
};

// The example order of `epoch`: shuffled_order, or length_grouped_order with options.group_by_length.
std::vector<std::size_t> epoch_order(const std::vector<std::size_t>& lengths, const SamplerOptions& options,
                                     std::uint64_t epoch);

// The micro-batches of one optimizer step.
using StepBatches = std::vector<std::vector<std::size_t>>;

// Cuts `order` into optimizer steps of micro_batch_size * accumulation_steps examples, each split into
// micro-batches of micro_batch_size. The last step holds what is left (fewer or shorter micro-batches), as HF's
// Trainer steps at the end of an epoch.
std::vector<StepBatches> plan_steps(const std::vector<std::size_t>& order, std::size_t micro_batch_size,
                                    std::size_t accumulation_steps);

// fairseq's batch_by_size with --max-tokens: batches whose padded size, examples x longest length (rounded up to
// pad_to_multiple_of), stays within max_tokens. Examples are sorted by length (ties in shuffled order), packed
// greedily, and the batches are shuffled; all from (seed, epoch). Throws std::invalid_argument when one example
// alone exceeds the budget.
struct TokenBudget {
  std::size_t max_tokens = 0;
  std::size_t max_examples = 0;  // 0: no limit on examples per batch
  std::size_t pad_to_multiple_of = 1;
};
std::vector<std::vector<std::size_t>> token_budget_batches(const std::vector<std::size_t>& lengths,
                                                           const TokenBudget& budget, std::uint64_t seed,
                                                           std::uint64_t epoch);

// len(input_ids) per example: what group_by_length sorts by (HF's model_input_name).
std::vector<std::size_t> input_lengths(const std::vector<Example>& examples);
// max(len(input_ids), len(labels)) per example: what a token budget counts (fairseq's num_tokens).
std::vector<std::size_t> token_lengths(const std::vector<Example>& examples);

}  // namespace fitsum::data
