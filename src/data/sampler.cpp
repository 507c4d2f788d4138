// Implements include/fitsum/data/sampler.h.
#include "fitsum/data/sampler.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fitsum::data {

std::uint64_t SplitMix64::next() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::uint64_t SplitMix64::below(std::uint64_t bound) {
  if (bound == 0) {
    throw std::invalid_argument("SplitMix64::below needs a positive bound");
  }
  // Reject the top partial copy of [0, bound) so that every value is equally likely.
  const std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t value = next();
    if (value >= threshold) {
      return value % bound;
    }
  }
}

SplitMix64 epoch_generator(std::uint64_t seed, std::uint64_t epoch, std::uint64_t stream) {
  // Mix the three numbers through the generator itself, so that nearby seeds and epochs give unrelated streams.
  SplitMix64 mixer(seed);
  const std::uint64_t a = mixer.next() ^ epoch;
  SplitMix64 second(a);
  const std::uint64_t b = second.next() ^ stream;
  return SplitMix64(SplitMix64(b).next());
}

std::vector<std::size_t> shuffled_order(std::size_t count, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::size_t> order(count);
  for (std::size_t i = 0; i < count; ++i) {
    order[i] = i;
  }
  SplitMix64 generator = epoch_generator(seed, epoch);
  for (std::size_t i = count; i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(generator.below(i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

std::vector<std::size_t> length_grouped_order(const std::vector<std::size_t>& lengths, std::size_t batch_size,
                                              std::uint64_t seed, std::uint64_t epoch) {
  if (batch_size == 0) {
    throw std::invalid_argument("length grouping needs a batch size of at least 1");
  }
  const std::size_t count = lengths.size();
  const std::size_t mega_batch_mult = std::max<std::size_t>(1, std::min<std::size_t>(count / (batch_size * 4), 50));
  const std::size_t mega_batch_size = mega_batch_mult * batch_size;
  std::vector<std::size_t> order = shuffled_order(count, seed, epoch);
  const auto longer = [&](std::size_t a, std::size_t b) { return lengths[a] > lengths[b]; };
  std::size_t longest_batch_start = 0;
  for (std::size_t start = 0; start < count; start += mega_batch_size) {
    const auto begin = order.begin() + static_cast<std::ptrdiff_t>(start);
    const auto end = order.begin() + static_cast<std::ptrdiff_t>(std::min(count, start + mega_batch_size));
    std::stable_sort(begin, end, longer);  // Python's sorted(reverse=True) keeps ties in order, too
    if (lengths[*begin] > lengths[order[longest_batch_start]]) {
      longest_batch_start = start;  // the first mega-batch holding the maximum, as torch.argmax picks
    }
  }
  if (count > 0) {
    std::swap(order[0], order[longest_batch_start]);
  }
  return order;
}

std::vector<std::size_t> epoch_order(const std::vector<std::size_t>& lengths, const SamplerOptions& options,
                                     std::uint64_t epoch) {
  return options.group_by_length ? length_grouped_order(lengths, options.examples_per_step, options.seed, epoch)
                                 : shuffled_order(lengths.size(), options.seed, epoch);
}

std::vector<StepBatches> plan_steps(const std::vector<std::size_t>& order, std::size_t micro_batch_size,
                                    std::size_t accumulation_steps) {
  if (micro_batch_size == 0 || accumulation_steps == 0) {
    throw std::invalid_argument("the micro-batch size and the accumulation steps must be at least 1");
  }
  std::vector<StepBatches> steps;
  for (std::size_t start = 0; start < order.size(); start += micro_batch_size) {
    if (steps.empty() || steps.back().size() == accumulation_steps) {
      steps.emplace_back();
    }
    const std::size_t end = std::min(order.size(), start + micro_batch_size);
    steps.back().emplace_back(order.begin() + static_cast<std::ptrdiff_t>(start),
                              order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return steps;
}

std::vector<std::vector<std::size_t>> token_budget_batches(const std::vector<std::size_t>& lengths,
                                                           const TokenBudget& budget, std::uint64_t seed,
                                                           std::uint64_t epoch) {
  if (budget.max_tokens == 0 || budget.pad_to_multiple_of == 0) {
    throw std::invalid_argument("a token budget needs max_tokens and pad_to_multiple_of of at least 1");
  }
  const auto padded = [&](std::size_t length) {
    return (length + budget.pad_to_multiple_of - 1) / budget.pad_to_multiple_of * budget.pad_to_multiple_of;
  };
  std::vector<std::size_t> order = shuffled_order(lengths.size(), seed, epoch);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return lengths[a] < lengths[b]; });

  std::vector<std::vector<std::size_t>> batches;
  std::vector<std::size_t> batch;
  std::size_t batch_length = 0;
  for (const std::size_t index : order) {
    const std::size_t length = padded(lengths[index]);
    if (length > budget.max_tokens) {
      throw std::invalid_argument("example " + std::to_string(index) + " has " + std::to_string(lengths[index]) +
                                  " tokens, more than max_tokens_per_batch " + std::to_string(budget.max_tokens) +
                                  " allows for one example; raise the budget or lower the maximum lengths");
    }
    const std::size_t longest = std::max(batch_length, length);
    const bool full = (batch.size() + 1) * longest > budget.max_tokens ||
                      (budget.max_examples > 0 && batch.size() == budget.max_examples);
    if (!batch.empty() && full) {
      batches.push_back(std::move(batch));
      batch.clear();
      batch_length = 0;
    }
    batch.push_back(index);
    batch_length = std::max(batch_length, length);
  }
  if (!batch.empty()) {
    batches.push_back(std::move(batch));
  }
  SplitMix64 generator = epoch_generator(seed, epoch, 1);
  for (std::size_t i = batches.size(); i > 1; --i) {
    std::swap(batches[i - 1], batches[static_cast<std::size_t>(generator.below(i))]);
  }
  return batches;
}

std::vector<std::size_t> input_lengths(const std::vector<Example>& examples) {
  std::vector<std::size_t> lengths;
  lengths.reserve(examples.size());
  for (const Example& example : examples) {
    lengths.push_back(example.input_ids.size());
  }
  return lengths;
}

std::vector<std::size_t> token_lengths(const std::vector<Example>& examples) {
  std::vector<std::size_t> lengths;
  lengths.reserve(examples.size());
  for (const Example& example : examples) {
    lengths.push_back(std::max(example.input_ids.size(), example.labels ? example.labels->size() : 0));
  }
  return lengths;
}

}  // namespace fitsum::data
