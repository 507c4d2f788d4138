// Implements include/fitsum/generate/beam_search.h, following transformers' GenerationMixin.beam_search
// (log-softmax, processors, + beam scores, top 2 * num_beams), BeamSearchScorer.process and .finalize and
// BeamHypotheses.add / .is_done, with the length normalisation GenerationOptions::beam_length picks. Differences from
// HF that do not change results: a source that is done leaves the decoder batch instead of being decoded with pad
// tokens; the first step decodes one row per source (all its beams are identical then) and copies it to the beams;
// the beams of a source share one copy of its cross-attention keys/values, which beam reordering leaves alone.
#include "fitsum/generate/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include <torch/torch.h>

#include "fitsum/generate/beam_candidates.h"
#include "fitsum/generate/logits_processors.h"
#include "fitsum/generate/step_decoder.h"

namespace fitsum::generate {

// ---- BeamHypotheses ----

BeamHypotheses::BeamHypotheses(std::int64_t num_beams, double length_penalty, EarlyStopping early_stopping,
                               std::int64_t longest_length)
    : num_beams_(num_beams),
      length_penalty_(length_penalty),
      early_stopping_(early_stopping),
      longest_length_(longest_length) {}

void BeamHypotheses::add(std::vector<std::int64_t> tokens, double sum_logprobs, std::int64_t length) {
  const double score = sum_logprobs / std::pow(static_cast<double>(length), length_penalty_);
  const auto kept = static_cast<std::int64_t>(hypotheses_.size());
  if (kept < num_beams_ || score > worst_score_) {
    hypotheses_.push_back({score, std::move(tokens)});
    if (kept + 1 > num_beams_) {
      // HF sorts (score, position) pairs, deletes the first and takes the second's score as the new worst.
      std::vector<std::pair<double, std::size_t>> order;
      for (std::size_t i = 0; i < hypotheses_.size(); ++i) order.emplace_back(hypotheses_[i].score, i);
      std::sort(order.begin(), order.end());
      hypotheses_.erase(hypotheses_.begin() + static_cast<std::ptrdiff_t>(order[0].second));
      worst_score_ = order[1].first;
    } else {
      worst_score_ = std::min(score, worst_score_);
    }
  }
}

bool BeamHypotheses::is_done(double best_sum_logprobs, std::int64_t cur_length) const {
  if (static_cast<std::int64_t>(hypotheses_.size()) < num_beams_) {
    return false;
  }
  switch (early_stopping_) {
    case EarlyStopping::on_full:
      return true;
    case EarlyStopping::heuristic:
      // The best running score as if it finished now; not a bound when length_penalty > 0 (HF PR #20901).
      return worst_score_ >= best_sum_logprobs / std::pow(static_cast<double>(cur_length), length_penalty_);
    case EarlyStopping::never: {
      // The best score still attainable: with length_penalty > 0 the longest possible sequence divides the least.
      const auto length = static_cast<double>(length_penalty_ > 0.0 ? longest_length_ : cur_length);
      return worst_score_ >= best_sum_logprobs / std::pow(length, length_penalty_);
    }
  }
  return false;
}

const BeamHypotheses::Hypothesis& BeamHypotheses::best() const {
  TORCH_CHECK(!hypotheses_.empty(), "BeamHypotheses::best: no hypothesis was added");
  std::size_t best = 0;
  for (std::size_t i = 1; i < hypotheses_.size(); ++i) {
    if (hypotheses_[i].score >= hypotheses_[best].score) best = i;
  }
  return hypotheses_[best];
}

// ---- The search ----

namespace {

std::vector<std::int64_t> row_tokens(const torch::Tensor& sequences, std::int64_t row) {
  const auto length = sequences.size(1);
  const auto* data = sequences.data_ptr<std::int64_t>() + row * length;
  return std::vector<std::int64_t>(data, data + length);
}

// The length a hypothesis of `tokens` tokens (start token first, eos not stored) is normalised by. From 4.37 HF counts
// the generated tokens, eos included: the same number for a hypothesis ended by eos, one less for a beam still open
// at max_length.
std::int64_t normalising_length(BeamLength convention, std::int64_t tokens, bool ended_by_eos) {
  return convention == BeamLength::classic || ended_by_eos ? tokens : tokens - 1;
}

// The length BeamHypotheses.is_done divides the step's best candidate score by. HF passes the length the candidates
// will have (input_ids.shape[-1] + 1); from 4.36 it subtracts the decoder prompt (the start token).
std::int64_t bounding_length(BeamLength convention, std::int64_t tokens) {
  return convention == BeamLength::classic ? tokens + 1 : tokens;
}

// The running search. R = num_beams * active sources (one row per source before the first step).
struct BeamState {
  torch::Tensor sequences;                 // (R, T) int64 on the CPU: each beam's tokens, start token first
  torch::Tensor beam_scores;               // (R) float32 on the device: each beam's sum of log-probabilities
  std::vector<std::int64_t> active;        // the sources still searching, in row order
  std::vector<BeamHypotheses> hypotheses;  // per source
  std::int64_t length = 1;                 // tokens per beam
};

// What BeamSearchScorer.process chose for the next step: the row each next beam extends, with which token, and its
// new score; and the sources that are not done.
struct NextBeams {
  std::vector<std::int64_t> rows;
  std::vector<std::int64_t> tokens;
  std::vector<float> scores;
  std::vector<std::int64_t> still_active;
  std::vector<std::int64_t> kept_positions;  // the positions in BeamState::active of still_active
};

// After the first step: each source's single row becomes num_beams rows. Beam 0 starts at 0 and the others at -1e9
// (HF's initial beam_scores), so the first step's candidates all extend beam 0 and the beams then differ.
torch::Tensor expand_to_beams(BeamState& state, StepDecoder& decoder, const torch::Tensor& log_probs,
                              std::int64_t beams) {
  const auto batch = state.sequences.size(0);
  auto expand = torch::arange(batch, torch::kLong).repeat_interleave(beams);  // (B * beams)
  state.sequences = state.sequences.index_select(0, expand);
  decoder.expand(beams);
  auto scores = torch::zeros({batch, beams}, log_probs.options().dtype(torch::kFloat32));
  scores.narrow(1, 1, beams - 1).fill_(-1e9);
  state.beam_scores = scores.view({-1});
  return log_probs.index_select(0, expand.to(log_probs.device()));
}

// BeamSearchScorer.process for the a-th active source: walking down its 2 * num_beams best candidates, an eos ranked
// within the first num_beams finishes a hypothesis (a lower-ranked eos is dropped), the first num_beams others become
// next beams. Returns whether the source is done.
bool process_source(BeamState& state, std::int64_t a, const torch::TensorAccessor<float, 1>& scores,
                    const torch::TensorAccessor<std::int64_t, 1>& ids, std::int64_t vocab,
                    const GenerationOptions& options, NextBeams& next) {
  const auto beams = options.num_beams;
  auto& hypotheses = state.hypotheses[state.active[a]];
  float best = -std::numeric_limits<float>::infinity();
  for (std::int64_t rank = 0; rank < 2 * beams; ++rank) best = std::max(best, scores[rank]);
  std::int64_t kept = 0;
  for (std::int64_t rank = 0; rank < 2 * beams && kept < beams; ++rank) {
    const auto token = ids[rank] % vocab;
    const auto row = a * beams + ids[rank] / vocab;
    if (token != options.eos_token_id) {
      next.rows.push_back(row);
      next.tokens.push_back(token);
      next.scores.push_back(scores[rank]);
      ++kept;
    } else if (rank < beams) {
      hypotheses.add(row_tokens(state.sequences, row), scores[rank],
                     normalising_length(options.beam_length, state.length, /*ended_by_eos=*/true));
    }
  }
  if (kept < beams) {
    throw std::runtime_error(
        "beam search found fewer than num_beams continuations that are not eos among the top 2 * num_beams "
        "candidates (HF raises the same)");
  }
  return hypotheses.is_done(best, bounding_length(options.beam_length, state.length));
}

// One step's bookkeeping over all active sources. log_probs (R, V) are the processed log-probabilities.
NextBeams process(BeamState& state, const torch::Tensor& log_probs, const GenerationOptions& options) {
  const auto beams = options.num_beams;
  const auto vocab = log_probs.size(1);
  const auto sources = static_cast<std::int64_t>(state.active.size());
  // Every continuation of every beam of a source, ranked together: (A, 2 * beams) of the (A, beams * V) sums.
  auto top = top_candidates(log_probs, state.beam_scores, beams, 2 * beams);
  const auto top_scores = top.scores.to(torch::kCPU);
  const auto top_ids = top.ids.to(torch::kCPU);
  const auto scores_of = top_scores.accessor<float, 2>();
  const auto ids_of = top_ids.accessor<std::int64_t, 2>();
  NextBeams next;
  for (std::int64_t a = 0; a < sources; ++a) {
    const auto first_kept = next.rows.size();
    if (process_source(state, a, scores_of[a], ids_of[a], vocab, options, next)) {
      next.rows.resize(first_kept);  // a finished source leaves the batch
      next.tokens.resize(first_kept);
      next.scores.resize(first_kept);
    } else {
      next.still_active.push_back(state.active[a]);
      next.kept_positions.push_back(a);
    }
  }
  return next;
}

// BeamSearchScorer.finalize: the beams of sources still open at max_length become hypotheses too.
void finalize_open_beams(BeamState& state, const GenerationOptions& options) {
  if (state.active.empty()) return;
  const auto scores = state.beam_scores.to(torch::kCPU);
  const auto length = normalising_length(options.beam_length, state.length, /*ended_by_eos=*/false);
  for (std::size_t a = 0; a < state.active.size(); ++a) {
    for (std::int64_t i = 0; i < options.num_beams; ++i) {
      const auto row = static_cast<std::int64_t>(a) * options.num_beams + i;
      state.hypotheses[state.active[a]].add(row_tokens(state.sequences, row), scores[row].item<float>(), length);
    }
  }
}

// The best hypothesis of each source; shorter ones get eos then pad, up to the longest + 1 (at most max_length).
void write_best(const std::vector<BeamHypotheses>& hypotheses, const GenerationOptions& options,
                GenerationResult& result) {
  const auto batch = static_cast<std::int64_t>(hypotheses.size());
  std::int64_t longest = 0;
  for (const auto& h : hypotheses) longest = std::max<std::int64_t>(longest, h.best().tokens.size());
  const auto width = std::min(longest + 1, options.effective_max_length());
  result.sequences = torch::full({batch, width}, options.pad_token_id, torch::kLong);
  result.sequence_scores = torch::empty({batch}, torch::kFloat32);
  auto out = result.sequences.accessor<std::int64_t, 2>();
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto& best = hypotheses[b].best();
    const auto n = static_cast<std::int64_t>(best.tokens.size());
    for (std::int64_t t = 0; t < n; ++t) out[b][t] = best.tokens[t];
    if (n < width) out[b][n] = options.eos_token_id;
    result.sequence_scores[b] = best.score;
  }
}

}  // namespace

GenerationResult beam_search(model::Seq2SeqLMImpl& model, const at::Tensor& input_ids, const at::Tensor& attention_mask,
                             const GenerationOptions& options) {
  options.validate_for(model.config());
  if (options.num_beams < 2) {
    throw std::invalid_argument("beam_search needs num_beams of 2 or more, but num_beams is " +
                                std::to_string(options.num_beams) + "; call greedy_search or generate()");
  }
  check_inputs(model, input_ids, attention_mask);
  EvalModeGuard inference(model);

  const auto batch = input_ids.size(0);
  const auto max_length = options.effective_max_length();
  const auto longest = normalising_length(options.beam_length, max_length, /*ended_by_eos=*/false);
  BeamState state;
  state.hypotheses.assign(batch,
                          BeamHypotheses(options.num_beams, options.length_penalty, options.early_stopping, longest));
  state.sequences = torch::full({batch, 1}, options.decoder_start_token_id, torch::kLong);
  for (std::int64_t b = 0; b < batch; ++b) state.active.push_back(b);
  StepDecoder decoder(model, model.encode(input_ids, attention_mask), attention_mask, options.use_cache);
  GenerationResult result;
  while (true) {
    auto log_probs = step_log_softmax(decoder.next_logits(state.sequences));  // (R, V)
    ++result.stats.decoder_steps;
    result.stats.decoded_rows += decoder.rows();
    if (state.length == 1) log_probs = expand_to_beams(state, decoder, log_probs, options.num_beams);
    apply_logits_processors(log_probs, state.sequences, options);
    auto next = process(state, log_probs, options);
    const bool same_sources = next.still_active.size() == state.active.size();
    state.active = std::move(next.still_active);
    if (state.active.empty()) break;
    auto index = torch::tensor(next.rows, torch::kLong);  // (R')
    state.sequences =
        torch::cat({state.sequences.index_select(0, index), torch::tensor(next.tokens, torch::kLong).unsqueeze(1)}, 1);
    state.beam_scores = torch::tensor(next.scores, torch::kFloat32).to(decoder.device());
    if (++state.length >= max_length) break;
    decoder.select(index, same_sources ? torch::Tensor() : torch::tensor(next.kept_positions, torch::kLong));
  }
  finalize_open_beams(state, options);
  write_best(state.hypotheses, options, result);
  return result;
}

}  // namespace fitsum::generate
