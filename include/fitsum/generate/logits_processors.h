// The logits processors that greedy and beam search apply before choosing tokens, as HF's LogitsProcessorList
// builds them from a GenerationConfig, in HF's order: NoRepeatNGramLogitsProcessor, MinLengthLogitsProcessor,
// ForcedBOSTokenLogitsProcessor, ForcedEOSTokenLogitsProcessor. Greedy search applies them to the raw logits, beam
// search to the log-softmax (as HF does); each only sets entries to -inf (or, for the forced eos, 0), so the order
// matters only for the last.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "fitsum/generate/options.h"

namespace fitsum::generate {

// The tokens that would complete an n-gram already present in `row` (all tokens so far, decoder start token
// included), i.e. HF's banned tokens for one hypothesis. Empty while the row is too short for an n-gram.
std::vector<std::int64_t> banned_ngram_tokens(const std::int64_t* row, std::int64_t length, std::int64_t ngram_size);

// scores (R, V) on any device, modified in place; sequences (R, T) int64 on the CPU, row r's tokens so far.
void ban_repeated_ngrams(const at::Tensor& scores, const at::Tensor& sequences, std::int64_t ngram_size);
// eos gets -inf while the sequences (all of length cur_length) are shorter than min_length.
void apply_min_length(const at::Tensor& scores, std::int64_t cur_length, std::int64_t min_length,
                      std::int64_t eos_token_id);
// At cur_length == 1 (the decoder start token alone) every token but forced_bos_token_id gets -inf and that one 0.
void apply_forced_bos(const at::Tensor& scores, std::int64_t cur_length, std::int64_t forced_bos_token_id);
// At cur_length == max_length - 1 every token but forced_eos_token_id gets -inf and that one gets 0.
void apply_forced_eos(const at::Tensor& scores, std::int64_t cur_length, std::int64_t max_length,
                      std::int64_t forced_eos_token_id);

// All of the above that `options` turns on, in HF's order.
void apply_logits_processors(const at::Tensor& scores, const at::Tensor& sequences, const GenerationOptions& options);

}  // namespace fitsum::generate
