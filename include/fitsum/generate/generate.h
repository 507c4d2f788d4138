// Generation for encoder-decoder models, as Hugging Face's generate() does it: encode the sources once, then decode
// greedily (num_beams == 1) or with beam search, under the options of options.h. What a search returns is defined
// here; the strategies are greedy_search.h and beam_search.h. The functions run without autograd and with dropout
// off, and put the model's training flag back when they return.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "fitsum/generate/options.h"

namespace fitsum::model {
class Seq2SeqLMImpl;
}

namespace fitsum::generate {

// The work a search did, for benchmarks and for checking that finished sequences cost nothing.
struct GenerationStats {
  std::int64_t decoder_steps = 0;  // decoder calls (one new position each)
  std::int64_t decoded_rows = 0;   // rows summed over those calls: sequences (or beams) actually decoded
};

struct GenerationResult {
  // (B, L) int64 on the CPU, as HF returns them: decoder start token first; a sequence that ends before the longest
  // one gets its eos and then pad. L <= max_length.
  at::Tensor sequences;
  // (B) float32 on the CPU: beam search's score of each returned sequence (sum of log-probabilities divided by
  // length^length_penalty, HF's sequences_scores). Undefined for greedy search.
  at::Tensor sequence_scores;
  GenerationStats stats;
};

// input_ids (B, S) and attention_mask (B, S) of 0/1, on the model's device. Greedy search when options.num_beams is
// 1, beam search otherwise. Throws std::invalid_argument for invalid options or inputs.
GenerationResult generate(model::Seq2SeqLMImpl& model, const at::Tensor& input_ids, const at::Tensor& attention_mask,
                          const GenerationOptions& options);

// Throws std::invalid_argument unless input_ids and attention_mask are (B, S) integer tensors of the same shape,
// B >= 1, on the model's device. Shared by the strategies.
void check_inputs(model::Seq2SeqLMImpl& model, const at::Tensor& input_ids, const at::Tensor& attention_mask);

}  // namespace fitsum::generate
