// Beam search (HF GenerationMixin.beam_search with BeamSearchScorer and BeamHypotheses; the length normalisation of
// transformers >= 4.37 or < 4.36, GenerationOptions::beam_length):
// num_beams rows per source decode side by side; each step ranks 2 * num_beams candidates per source from the
// log-softmax plus the running beam scores, moves eos candidates ranked within the first num_beams into the
// source's finished hypotheses, and keeps the best num_beams others as the next beams. A source is done by HF's
// BeamHypotheses.is_done (see EarlyStopping); done sources leave the decoder batch. At max_length the open beams are
// finalized as hypotheses too, and each source returns its best hypothesis, padded like HF.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "fitsum/generate/generate.h"

namespace fitsum::generate {

// The finished hypotheses of one source, kept to the num_beams best (HF BeamHypotheses).
class BeamHypotheses {
 public:
  struct Hypothesis {
    double score;                      // sum_logprobs / length^length_penalty
    std::vector<std::int64_t> tokens;  // start token first, no eos
  };

  // longest_length: the largest `length` a hypothesis can reach, the bound of early_stopping "never" (HF's max_length
  // minus the decoder prompt from 4.37 on, max_length before 4.36).
  BeamHypotheses(std::int64_t num_beams, double length_penalty, EarlyStopping early_stopping,
                 std::int64_t longest_length);

  // Scores a hypothesis as sum_logprobs / length^length_penalty (HF's generated_len) and keeps it if it is among the
  // num_beams best.
  void add(std::vector<std::int64_t> tokens, double sum_logprobs, std::int64_t length);
  // Whether no running beam can still improve this source's hypotheses: best_sum_logprobs is the best candidate
  // score of the step, cur_length the length of the running sequences (before this step's token).
  bool is_done(double best_sum_logprobs, std::int64_t cur_length) const;
  // The best hypothesis; among equal scores the one added last, as HF's sorted(...).pop() picks.
  const Hypothesis& best() const;

  std::size_t size() const { return hypotheses_.size(); }
  double worst_score() const { return worst_score_; }

 private:
  std::int64_t num_beams_;
  double length_penalty_;
  EarlyStopping early_stopping_;
  std::int64_t longest_length_;
  std::vector<Hypothesis> hypotheses_;  // in insertion order, as HF's list (ties resolve by it)
  double worst_score_ = 1e9;            // HF's initial value
};

// input_ids (B, S), attention_mask (B, S) on the model's device; options.num_beams must be at least 2.
GenerationResult beam_search(model::Seq2SeqLMImpl& model, const at::Tensor& input_ids, const at::Tensor& attention_mask,
                             const GenerationOptions& options);

}  // namespace fitsum::generate
