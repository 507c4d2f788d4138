// Implements include/fitsum/data/sampler.h.
#include "fitsum/data/sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fitsum::data {

namespace {

std::vector<std::size_t> randperm(std::size_t count, at::Generator& generator) {
  const auto permutation = torch::randperm(static_cast<std::int64_t>(count), generator, torch::kInt64);
  const auto* values = permutation.data_ptr<std::int64_t>();
  return std::vector<std::size_t>(values, values + count);
}

// What torch.utils.data's DataLoader draws from the global generator each time it starts an epoch's iterator (its
// workers' base seed): one int64.
void data_loader_base_seed_draw(at::Generator& generator) { torch::empty({}, torch::kInt64).random_(generator); }

// transformers' LengthGroupedSampler takes no generator, so its torch.randperm draws from the global CPU generator,
// which set_seed(seed) seeded and which, before each epoch's permutation, every epoch's DataLoader iterator advanced
// by one draw (and every earlier epoch by its permutation). Nothing else draws from it in a transformers >= 4.48
// run without dropout on the CPU and without layer drop (docs/hf.md).
std::vector<std::size_t> global_generator_permutation(std::size_t count, std::uint64_t seed, std::uint64_t epoch) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (std::uint64_t e = 0; e < epoch; ++e) {
    data_loader_base_seed_draw(generator);
    randperm(count, generator);
  }
  data_loader_base_seed_draw(generator);
  return randperm(count, generator);
}

// HF's DataLoader batches of `order` (the last one short, or dropped with drop_last).
std::vector<std::vector<std::size_t>> data_loader_batches(const std::vector<std::size_t>& order,
                                                          const SamplerOptions& options) {
  std::vector<std::vector<std::size_t>> batches;
  for (std::size_t start = 0; start < order.size(); start += options.batch_size) {
    const std::size_t end = std::min(order.size(), start + options.batch_size);
    if (options.drop_last && end - start < options.batch_size) break;
    batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(start),
                         order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return batches;
}

// accelerate's BatchSamplerShard (split_batches=False, even_batches=True) in one list: batch k goes to process
// k mod N. With drop_last only complete rounds are kept. Otherwise a short last batch is completed, and the last
// round filled with whole batches, from the examples of the first N batches (repeated while they are fewer than
// N full batches), so that every process gets the same number of full batches.
std::vector<std::vector<std::size_t>> shard_rounds(std::vector<std::vector<std::size_t>> batches,
                                                   const SamplerOptions& options) {
  const std::size_t n = options.processes;
  if (n == 1 || batches.empty()) return batches;
  if (options.drop_last) {
    batches.resize(batches.size() / n * n);
    return batches;
  }
  std::vector<std::size_t> start;
  for (std::size_t k = 0; k < std::min(n, batches.size()); ++k)
    start.insert(start.end(), batches[k].begin(), batches[k].end());
  std::vector<std::size_t> first;
  while (first.size() < n * options.batch_size) first.insert(first.end(), start.begin(), start.end());
  std::size_t next = 0;
  auto& last = batches.back();
  while (last.size() < options.batch_size) last.push_back(first[next++]);
  while (batches.size() % n != 0) {
    const auto begin = first.begin() + static_cast<std::ptrdiff_t>(next);
    batches.emplace_back(begin, begin + static_cast<std::ptrdiff_t>(options.batch_size));
    next += options.batch_size;
  }
  return batches;
}

void check_options(const SamplerOptions& options) {
  if (options.batch_size == 0 || options.accumulation_steps == 0 || options.processes == 0) {
    throw std::invalid_argument("the batch size, the accumulation steps and the processes must be at least 1");
  }
}

// Batches per process in an epoch of `count` examples (len() of accelerate's prepared DataLoader).
std::size_t batches_per_process(std::size_t count, const SamplerOptions& options) {
  check_options(options);
  const std::size_t batches =
      options.drop_last ? count / options.batch_size : (count + options.batch_size - 1) / options.batch_size;
  const std::size_t n = options.processes;
  const std::size_t per_process = options.drop_last || n == 1 ? batches / n : (batches + n - 1) / n;
  if (count == 0) throw std::invalid_argument("there are no training examples to order");
  if (per_process == 0) {
    throw std::invalid_argument(
        std::to_string(count) + " training examples make no batch of per_device_train_batch_size " +
        std::to_string(options.batch_size) + (n > 1 ? " for each of " + std::to_string(n) + " processes" : "") +
        " with dataloader_drop_last; use more examples, a smaller batch, or keep the last batch");
  }
  return per_process;
}

}  // namespace

std::vector<std::size_t> torch_randperm(std::size_t count, std::uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return randperm(count, generator);
}

std::vector<std::size_t> group_by_length(const std::vector<std::size_t>& permutation,
                                         const std::vector<std::size_t>& lengths, std::size_t batch_size) {
  if (batch_size == 0) {
    throw std::invalid_argument("length grouping needs a batch size of at least 1");
  }
  const std::size_t count = permutation.size();
  const std::size_t mega_batch_mult = std::max<std::size_t>(1, std::min<std::size_t>(count / (batch_size * 4), 50));
  const std::size_t mega_batch_size = mega_batch_mult * batch_size;
  std::vector<std::size_t> order = permutation;
  const auto longer = [&](std::size_t a, std::size_t b) { return lengths.at(a) > lengths.at(b); };
  std::size_t longest_batch_start = 0;
  for (std::size_t start = 0; start < count; start += mega_batch_size) {
    const auto begin = order.begin() + static_cast<std::ptrdiff_t>(start);
    const auto end = order.begin() + static_cast<std::ptrdiff_t>(std::min(count, start + mega_batch_size));
    std::stable_sort(begin, end, longer);
    if (lengths[*begin] > lengths[order[longest_batch_start]]) longest_batch_start = start;
  }
  if (count > 0) std::swap(order[0], order[longest_batch_start]);
  return order;
}

std::vector<std::size_t> epoch_order(const std::vector<std::size_t>& lengths, const SamplerOptions& options,
                                     std::uint64_t epoch) {
  check_options(options);
  if (!options.group_by_length) return torch_randperm(lengths.size(), options.data_seed + epoch);
  return group_by_length(global_generator_permutation(lengths.size(), options.seed, epoch), lengths,
                         options.batch_size * options.accumulation_steps);
}

std::vector<StepBatches> plan_epoch(const std::vector<std::size_t>& order, const SamplerOptions& options) {
  const std::size_t per_process = batches_per_process(order.size(), options);
  const auto rounds = shard_rounds(data_loader_batches(order, options), options);
  const std::size_t n = options.processes;
  const std::size_t accumulation = options.accumulation_steps;
  std::vector<StepBatches> steps;
  for (std::size_t first = 0; first < per_process; first += accumulation) {
    const std::size_t last = std::min(per_process, first + accumulation);
    StepBatches step;
    for (std::size_t process = 0; process < n; ++process) {
      for (std::size_t k = first; k < last; ++k) step.push_back(rounds[k * n + process]);
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

std::size_t steps_per_epoch(std::size_t count, const SamplerOptions& options) {
  return (batches_per_process(count, options) + options.accumulation_steps - 1) / options.accumulation_steps;
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
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed + epoch);
  std::vector<std::size_t> order = randperm(lengths.size(), generator);
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
  if (!batch.empty()) batches.push_back(std::move(batch));
  std::vector<std::vector<std::size_t>> shuffled;
  shuffled.reserve(batches.size());
  for (const std::size_t k : randperm(batches.size(), generator)) shuffled.push_back(std::move(batches[k]));
  return shuffled;
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
