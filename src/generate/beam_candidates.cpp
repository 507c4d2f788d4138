// Implements include/fitsum/generate/beam_candidates.h. LibTorch's CPU topk copies every (value, index) pair of a
// row into a buffer and partially sorts it: at PEGASUS's vocabulary and 8 beams, 769k pairs per source at every step,
// plus the add's pass that writes the sums. Here a source keeps a heap of its k best (score, index) pairs; the
// log-probabilities are read in blocks, and a block whose every sum is at most the heap's worst score (almost all of
// them once the heap holds good candidates) costs one vectorisable comparison per element.
#include "fitsum/generate/beam_candidates.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif
#include <torch/torch.h>

#include "fitsum/util/threads.h"

namespace fitsum::generate {
namespace {

struct Candidate {
  float score;
  std::int64_t index;
};

// Whether a ranks before b: NaN first (as torch.topk's comparator), then the larger score, then the lower index.
bool ranks_before(const Candidate& a, const Candidate& b) {
  const bool a_nan = std::isnan(a.score);
  const bool b_nan = std::isnan(b.score);
  if (a_nan != b_nan) return a_nan;
  if (!a_nan && a.score != b.score) return a.score > b.score;
  return a.index < b.index;
}

// Whether any x[i] + add might enter a heap whose worst score is `worst`: a sum above it, or NaN (a NaN worst
// admits every block, where ranks_before decides).
__attribute__((target_clones("avx2", "default"))) bool any_above(const float* x, float add, float worst,
                                                                 std::int64_t n) {
  unsigned hits = 0;
  for (std::int64_t i = 0; i < n; ++i) hits |= (x[i] + add <= worst) ? 0u : 1u;
  return hits != 0;
}

// The k best candidates of one source into `heap` (a max-heap under ranks_before: its front is the worst kept).
void rank_source(const float* log_probs, const float* beam_scores, std::int64_t num_beams, std::int64_t vocab,
                 std::int64_t k, std::vector<Candidate>& heap) {
  constexpr std::int64_t block = 64;
  heap.clear();
  const auto offer = [&](Candidate c) {
    if (static_cast<std::int64_t>(heap.size()) < k) {
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), ranks_before);
    } else if (ranks_before(c, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), ranks_before);
      heap.back() = c;
      std::push_heap(heap.begin(), heap.end(), ranks_before);
    }
  };
  for (std::int64_t beam = 0; beam < num_beams; ++beam) {
    const float* row = log_probs + beam * vocab;
    const float add = beam_scores[beam];
    for (std::int64_t begin = 0; begin < vocab; begin += block) {
      const auto n = std::min(block, vocab - begin);
      if (static_cast<std::int64_t>(heap.size()) == k && !any_above(row + begin, add, heap.front().score, n)) continue;
      for (std::int64_t j = begin; j < begin + n; ++j) offer({row[j] + add, beam * vocab + j});
    }
  }
  std::sort_heap(heap.begin(), heap.end(), ranks_before);
}

}  // namespace

TopCandidates top_candidates(const at::Tensor& log_probs, const at::Tensor& beam_scores, std::int64_t num_beams,
                             std::int64_t k) {
  if (log_probs.dim() != 2 || num_beams < 1 || log_probs.size(0) % num_beams != 0 || beam_scores.dim() != 1 ||
      beam_scores.size(0) != log_probs.size(0)) {
    throw std::invalid_argument(
        "top_candidates needs log_probs (A * num_beams, V) and beam_scores (A * num_beams); got " +
        std::to_string(log_probs.dim()) + "-d log_probs of " + std::to_string(log_probs.size(0)) + " rows, " +
        std::to_string(beam_scores.numel()) + " beam scores and num_beams " + std::to_string(num_beams));
  }
  const auto sources = log_probs.size(0) / num_beams;
  const auto vocab = log_probs.size(1);
  if (k < 1 || k > num_beams * vocab) {
    throw std::invalid_argument("top_candidates: k is " + std::to_string(k) + ", but a source has " +
                                std::to_string(num_beams * vocab) + " candidates");
  }
  const bool here = log_probs.device().is_cpu() && beam_scores.device().is_cpu() &&
                    log_probs.scalar_type() == at::kFloat && beam_scores.scalar_type() == at::kFloat &&
                    log_probs.is_contiguous() && beam_scores.is_contiguous();
  if (!here) {
    auto sums = (log_probs + beam_scores.unsqueeze(1)).reshape({sources, num_beams * vocab});
    auto [scores, ids] = torch::topk(sums, k, 1, /*largest=*/true, /*sorted=*/true);
    return {scores, ids};
  }
  TopCandidates top{torch::empty({sources, k}, torch::kFloat), torch::empty({sources, k}, torch::kLong)};
  const float* lp = log_probs.data_ptr<float>();
  const float* bs = beam_scores.data_ptr<float>();
  auto* scores = top.scores.data_ptr<float>();
  auto* ids = top.ids.data_ptr<std::int64_t>();
  std::vector<Candidate> heap;
  heap.reserve(static_cast<std::size_t>(k));
  for (std::int64_t a = 0; a < sources; ++a) {
    rank_source(lp + a * num_beams * vocab, bs + a * num_beams, num_beams, vocab, k, heap);
    for (std::int64_t r = 0; r < k; ++r) {
      scores[a * k + r] = heap[r].score;
      ids[a * k + r] = heap[r].index;
    }
  }
  return top;
}

at::Tensor step_log_softmax(const at::Tensor& logits) {
#ifdef _OPENMP
  // At least 2^18 elements per thread: below that, starting the threads costs more than they save.
  const std::int64_t threads =
      logits.dim() == 2 ? std::min<std::int64_t>({util::blas_threads(), logits.size(0), logits.numel() >> 18}) : 0;
  const bool records = at::GradMode::is_enabled() && logits.requires_grad();
  if (threads > 1 && logits.device().is_cpu() && logits.layout() == at::kStrided &&
      logits.scalar_type() == at::kFloat && !records && !omp_in_parallel()) {
    const auto input = logits.contiguous();
    auto output = at::empty_like(input);
    const auto rows = input.size(0);
    const auto share = (rows + threads - 1) / threads;
    std::exception_ptr failure;
    const int team = static_cast<int>(threads);
#pragma omp parallel num_threads(team)
    {
      const std::int64_t begin = omp_get_thread_num() * share;
      const std::int64_t count = std::min(rows, begin + share) - begin;
      if (count > 0) {
        try {
          auto part = output.narrow(0, begin, count);
          at::_log_softmax_out(part, input.narrow(0, begin, count), 1, false);
        } catch (...) {
#pragma omp critical(fitsum_step_log_softmax)
          failure = std::current_exception();
        }
      }
    }
    if (failure) std::rethrow_exception(failure);
    return output;
  }
#endif
  return torch::log_softmax(logits, -1);
}

}  // namespace fitsum::generate
