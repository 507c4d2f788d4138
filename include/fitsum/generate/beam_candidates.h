// The candidates a beam-search step ranks: for each source, the k best of its num_beams x V continuations, scored
// as the beam's running score plus the token's log-probability (HF's next_token_scores + beam_scores, then
// torch.topk over the (num_beams * V) scores of the source, largest first).
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace fitsum::generate {

struct TopCandidates {
  at::Tensor scores;  // (A, k) float: log_probs[row][token] + beam_scores[row], in float as the add computes it
  at::Tensor ids;     // (A, k) long: (row - source * num_beams) * V + token, as in the (A, num_beams * V) view
};

// log_probs (A * num_beams, V) and beam_scores (A * num_beams) float. Equals
// torch::topk((log_probs + beam_scores.unsqueeze(1)).view({A, num_beams * V}), k, 1, true, true) with one rule for
// equal scores, which torch.topk leaves unspecified: the lower index first (NaN ranks above every number, as in
// torch.topk). On the CPU, for contiguous float tensors, one pass over the log-probabilities that compares each with
// the k-th best score so far and neither writes the sums nor sorts more than k of them; elsewhere LibTorch's add and
// topk. k must be at least 1 and at most num_beams * V.
TopCandidates top_candidates(const at::Tensor& log_probs, const at::Tensor& beam_scores, std::int64_t num_beams,
                             std::int64_t k);

// torch::log_softmax(logits, -1) for a step's logits (R, V), the same values bit for bit: LibTorch's kernel computes
// each row alone, and here, on the CPU for float32 without a graph to record, the rows are shared between as many
// threads as the BLAS has (fitsum keeps LibTorch's intra-op pool at one thread where the BLAS has its own, so
// LibTorch's log_softmax runs on one): a beam-8 step over 4 sources and PEGASUS's vocabulary, 2.1 -> 1.1 ms on two
// cores.
at::Tensor step_log_softmax(const at::Tensor& logits);

}  // namespace fitsum::generate
