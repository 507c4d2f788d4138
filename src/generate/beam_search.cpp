// Implements include/fitsum/generate/beam_search.h, following transformers 4.x before 4.36:
// GenerationMixin.beam_search (log-softmax, processors, + beam scores, top 2 * num_beams), BeamSearchScorer.process
// and .finalize, BeamHypotheses.add / .is_done. Differences from HF that do not change results: a source that is
// done leaves the decoder batch instead of being decoded with pad tokens; the first step decodes one row per source
// (all its beams are identical then) and copies it to the beams; beams reordered within a source keep their
// cross-attention keys/values.
#include "fitsum/generate/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include <torch/torch.h>

#include "fitsum/generate/logits_processors.h"
#include "fitsum/generate/step_decoder.h"

namespace fitsum::generate {

// ---- BeamHypotheses ----

BeamHypotheses::BeamHypotheses(std::int64_t num_beams, double length_penalty, EarlyStopping early_stopping,
                               std::int64_t max_length)
    : num_beams_(num_beams),
      length_penalty_(length_penalty),
      early_stopping_(early_stopping),
      max_length_(max_length) {}

void BeamHypotheses::add(std::vector<std::int64_t> tokens, double sum_logprobs) {
  // Classic normalisation: the length counts the decoder start token and not the eos (docs/generate.md).
  const double score = sum_logprobs / std::pow(static_cast<double>(tokens.size()), length_penalty_);
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
      const double length = length_penalty_ > 0.0 ? static_cast<double>(max_length_) : static_cast<double>(cur_length);
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

}  // namespace

namespace {

// The next beams of every active source, as BeamSearchScorer.process chooses them from the ranked candidates.
struct NextBeams {
  std::vector<std::int64_t> rows;    // the row each next beam extends
  std::vector<std::int64_t> tokens;  // and with which token
  std::vector<float> scores;         // its new sum of log-probabilities
  std::vector<std::int64_t> still_active;
};

// top_scores / top_ids (A, 2 * beams) on the CPU: candidates ranked per source; ids index (beams * V).
NextBeams process_candidates(const at::Tensor& top_scores, const at::Tensor& top_ids, std::int64_t vocab,
                             std::int64_t length, const at::Tensor& sequences, const std::vector<std::int64_t>& active,
                             std::vector<BeamHypotheses>& hypotheses, std::int64_t beams, std::int64_t eos) {
  const auto scores_of = top_scores.accessor<float, 2>();
  const auto ids_of = top_ids.accessor<std::int64_t, 2>();
  NextBeams next;
  for (std::size_t a = 0; a < active.size(); ++a) {
    const auto source = active[a];
    std::int64_t kept = 0;
    float best = -std::numeric_limits<float>::infinity();
    for (std::int64_t rank = 0; rank < 2 * beams; ++rank) best = std::max(best, scores_of[a][rank]);
    const auto first_kept = next.rows.size();
    for (std::int64_t rank = 0; rank < 2 * beams && kept < beams; ++rank) {
      const auto id = ids_of[a][rank];
      const auto token = id % vocab;
      const auto row = static_cast<std::int64_t>(a) * beams + id / vocab;
      const float score = scores_of[a][rank];
      if (token == eos) {
        // An eos ranked below the first num_beams candidates is dropped, not kept as a hypothesis.
        if (rank < beams) hypotheses[source].add(row_tokens(sequences, row), score);
      } else {
        next.rows.push_back(row);
        next.tokens.push_back(token);
        next.scores.push_back(score);
        ++kept;
      }
    }
    if (kept < beams) {
      throw std::runtime_error(
          "beam search found fewer than num_beams continuations that are not eos among the "
          "top 2 * num_beams candidates (HF raises the same)");
    }
    if (hypotheses[source].is_done(best, length)) {
      next.rows.resize(first_kept);  // a finished source leaves the batch
      next.tokens.resize(first_kept);
      next.scores.resize(first_kept);
    } else {
      next.still_active.push_back(source);
    }
  }
  return next;
}

// BeamSearchScorer.finalize: the beams of sources still open at max_length become hypotheses too; then the best
// hypothesis of each source, shorter ones padded with eos then pad, up to the longest + 1 (at most max_length).
void finalize(GenerationResult& result, std::vector<BeamHypotheses>& hypotheses,
              const std::vector<std::int64_t>& active, const at::Tensor& sequences, const at::Tensor& beam_scores,
              std::int64_t beams, std::int64_t max_length, const GenerationOptions& options) {
  const auto final_scores = active.empty() ? torch::Tensor() : beam_scores.to(torch::kCPU);
  for (std::size_t a = 0; a < active.size(); ++a) {
    for (std::int64_t i = 0; i < beams; ++i) {
      const auto row = static_cast<std::int64_t>(a) * beams + i;
      hypotheses[active[a]].add(row_tokens(sequences, row), final_scores[row].item<float>());
    }
  }
  const auto batch = static_cast<std::int64_t>(hypotheses.size());
  std::int64_t longest = 0;
  for (const auto& h : hypotheses) longest = std::max<std::int64_t>(longest, h.best().tokens.size());
  const auto width = std::min(longest + 1, max_length);
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
  const auto beams = options.num_beams;
  const auto max_length = options.effective_max_length();
  GenerationResult result;
  std::vector<BeamHypotheses> hypotheses(
      batch, BeamHypotheses(beams, options.length_penalty, options.early_stopping, max_length));
  StepDecoder decoder(model, model.encode(input_ids, attention_mask), attention_mask, options.use_cache);
  const auto device = decoder.device();
  // The running beams' tokens (R, T) on the CPU, R = beams * active sources; the first step has one row per source.
  auto sequences = torch::full({batch, 1}, options.decoder_start_token_id, torch::kLong);
  torch::Tensor beam_scores;                // (R) float32 on the device: each beam's sum of log-probabilities
  std::vector<std::int64_t> active(batch);  // the sources still searching, in row order
  for (std::int64_t b = 0; b < batch; ++b) active[b] = b;
  for (std::int64_t length = 1;;) {
    auto log_probs = torch::log_softmax(decoder.next_logits(sequences), -1);  // (R, V)
    ++result.stats.decoder_steps;
    result.stats.decoded_rows += decoder.rows();
    if (length == 1) {
      // Copy each source's row into its beams. Beam 0 starts at 0 and the others at -1e9 (HF's initial
      // beam_scores), so the first step's candidates all extend beam 0 and the beams then differ.
      auto expand = torch::arange(batch, torch::kLong).repeat_interleave(beams);  // (B * beams)
      log_probs = log_probs.index_select(0, expand.to(device));
      sequences = sequences.index_select(0, expand);
      decoder.select(expand);
      beam_scores = torch::zeros({batch, beams}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
      beam_scores.narrow(1, 1, beams - 1).fill_(-1e9);
      beam_scores = beam_scores.view({-1});
    }
    apply_logits_processors(log_probs, sequences, options);
    const auto vocab = log_probs.size(1);
    const auto sources = static_cast<std::int64_t>(active.size());
    // (A, beams * V): every continuation of every beam of a source, ranked together. In place: at PEGASUS's
    // vocabulary each (R, V) temporary is megabytes, and log_probs is not needed afterwards.
    auto candidates = log_probs.add_(beam_scores.unsqueeze(1)).view({sources, beams * vocab});
    auto [top_scores, top_ids] = torch::topk(candidates, 2 * beams, 1, /*largest=*/true, /*sorted=*/true);
    auto next = process_candidates(top_scores.to(torch::kCPU), top_ids.to(torch::kCPU), vocab, length, sequences,
                                   active, hypotheses, beams, options.eos_token_id);
    if (next.still_active.empty()) {
      active.clear();
      break;
    }
    auto index = torch::tensor(next.rows, torch::kLong);  // (R')
    sequences =
        torch::cat({sequences.index_select(0, index), torch::tensor(next.tokens, torch::kLong).unsqueeze(1)}, 1);
    beam_scores = torch::tensor(next.scores, torch::kFloat32).to(device);
    ++length;
    const bool same_sources = static_cast<std::int64_t>(next.still_active.size()) == sources;
    active = std::move(next.still_active);
    if (length >= max_length) break;
    decoder.select(index, same_sources);
  }
  finalize(result, hypotheses, active, sequences, beam_scores, beams, max_length, options);
  return result;
}

}  // namespace fitsum::generate
