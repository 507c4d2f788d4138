// The order in which an epoch visits the examples, and how it is cut into optimizer steps: Hugging Face's, so that
// `fitsum train` and transformers' Seq2SeqTrainer (with accelerate) see the same examples at every step for the
// same seed (docs/hf.md, "The data order"):
//
//  - Shuffling is accelerate's SeedableRandomSampler: torch.randperm(count) from a CPU generator seeded with
//    data_seed (default: seed) + epoch. LibTorch's randperm is Python's (the same library), so the permutation is
//    transformers' for the same seed, epoch after epoch.
//  - --group_by_length is transformers' LengthGroupedSampler, which draws its permutation from torch's global CPU
//    generator: seeded by set_seed(seed) (data_seed plays no part), and advanced each epoch by the DataLoader's
//    base-seed draw and by the permutation itself. fitsum replays those draws, so the order depends only on
//    (seed, epoch, lengths) and a resume continues it exactly.
//  - The DataLoader cuts the order into batches of the per-process batch size (the last one short, or dropped with
//    drop_last); with several processes accelerate's BatchSamplerShard deals them out in turn (batch k to process
//    k mod N) and completes the last round with examples from the start of the epoch, so that every process gets as
//    many full batches; each process accumulates its batches into optimizer steps.
//
// The order never depends on the micro-batches the trainer runs: a step's examples are fixed by the batch size the
// user asked for, and the trainer (or the memory planner, or an out-of-memory split) cuts each process's share of a
// step into whatever micro-batches fit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fitsum/data/dataset.h"

namespace fitsum::data {

// torch.randperm(count, generator=torch.Generator().manual_seed(seed)), through LibTorch's own randperm. Equal to
// Python's on torch 1.13 and 2.x up to 214,748,363 elements (2.x shuffles longer ranges with another algorithm).
std::vector<std::size_t> torch_randperm(std::size_t count, std::uint64_t seed);

// transformers' get_length_grouped_indices applied to `permutation`: cut into mega-batches of
// mega_batch_mult * batch_size (mult = min(count / (4 * batch_size), 50), at least 1), each sorted by length,
// longest first (stable, as Python's sorted(reverse=True)), then the first example swapped with the longest of all
// (the first mega-batch holding the maximum, as torch.argmax picks) so that an out-of-memory shows up at once.
std::vector<std::size_t> group_by_length(const std::vector<std::size_t>& permutation,
                                         const std::vector<std::size_t>& lengths, std::size_t batch_size);

struct SamplerOptions {
  bool group_by_length = false;  // --group_by_length (transformers' LengthGroupedSampler)
  std::uint64_t seed = 42;       // --seed: set_seed's, which --group_by_length's permutation comes from
  std::uint64_t data_seed = 42;  // --data_seed (default: --seed): the shuffle's
  std::size_t batch_size = 1;    // examples per process and batch: the user's per_device_train_batch_size
  std::size_t accumulation_steps = 1;
  std::size_t processes = 1;
  bool drop_last = false;  // --dataloader_drop_last
};

// The example order of `epoch` (0-based): torch_randperm(count, data_seed + epoch), or with group_by_length the
// replayed global generator's permutation grouped by `lengths` in groups of batch_size * accumulation_steps (the
// batch size transformers passes, per process).
std::vector<std::size_t> epoch_order(const std::vector<std::size_t>& lengths, const SamplerOptions& options,
                                     std::uint64_t epoch);

// The examples of one optimizer step, in micro-batches of batch_size: process 0's, then process 1's, ...; with
// several processes each holds the same number of examples, so process r's share is the r-th of N equal parts.
using StepBatches = std::vector<std::vector<std::size_t>>;

// The optimizer steps of an epoch with `order`: HF's DataLoader batches, dealt to the processes by BatchSamplerShard
// (even_batches), each process's batches accumulated accumulation_steps at a time; the last step holds what is left.
// Throws std::invalid_argument when drop_last leaves no batch.
std::vector<StepBatches> plan_epoch(const std::vector<std::size_t>& order, const SamplerOptions& options);

// plan_epoch's number of steps for `count` examples, without the order (transformers >= 4.48's
// num_update_steps_per_epoch: batches per process / accumulation, rounded up). Throws as plan_epoch does.
std::size_t steps_per_epoch(std::size_t count, const SamplerOptions& options);

// fairseq's batch_by_size with --max-tokens: batches whose padded size, examples x longest length (rounded up to
// pad_to_multiple_of), stays within max_tokens. Examples are sorted by length (ties in shuffled order), packed
// greedily, and the batches are shuffled; both shuffles come from one torch generator seeded with seed + epoch.
// Throws std::invalid_argument when one example alone exceeds the budget.
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
