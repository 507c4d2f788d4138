// top_candidates, the ranking of a beam-search step, against LibTorch's add + topk (HF's next_token_scores +
// beam_scores, torch.topk) where no scores are equal, and against a full stable sort where they are (the rule
// torch.topk leaves open: the lower index first); with -inf (masked tokens), NaN, the first step's -1e9 beams, k up
// to every candidate, and inputs that take LibTorch's path.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/generate/beam_candidates.h"
#include "fitsum/util/threads.h"

namespace fitsum::generate {
namespace {

// The k best sums of every source by a full stable sort: NaN first, then larger sums, then lower indices.
TopCandidates sorted_reference(const at::Tensor& log_probs, const at::Tensor& beam_scores, std::int64_t beams,
                               std::int64_t k) {
  const auto sums = (log_probs + beam_scores.unsqueeze(1)).view({log_probs.size(0) / beams, -1}).contiguous();
  const auto sources = sums.size(0);
  TopCandidates top{torch::empty({sources, k}, torch::kFloat), torch::empty({sources, k}, torch::kLong)};
  for (std::int64_t a = 0; a < sources; ++a) {
    const auto row = sums[a];
    const auto* v = row.data_ptr<float>();
    std::vector<std::int64_t> order(row.numel());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t x, std::int64_t y) {
      if (std::isnan(v[x]) != std::isnan(v[y])) return std::isnan(v[x]);
      return v[x] > v[y];
    });
    for (std::int64_t r = 0; r < k; ++r) {
      top.scores[a][r] = v[order[r]];
      top.ids[a][r] = order[r];
    }
  }
  return top;
}

void expect_same(const TopCandidates& got, const TopCandidates& want) {
  ASSERT_EQ(got.scores.sizes(), want.scores.sizes());
  EXPECT_TRUE(torch::equal(got.ids, want.ids)) << "ids\n" << got.ids << "\nwant\n" << want.ids;
  // Bit for bit, NaN where NaN.
  EXPECT_TRUE(torch::equal(got.scores.isnan(), want.scores.isnan()));
  EXPECT_TRUE(torch::equal(got.scores.nan_to_num(0.0), want.scores.nan_to_num(0.0))) << "scores\n"
                                                                                     << got.scores << "\nwant\n"
                                                                                     << want.scores;
}

at::Tensor log_probs_of(std::int64_t rows, std::int64_t vocab, std::uint64_t seed) {
  torch::manual_seed(seed);
  return torch::log_softmax(torch::randn({rows, vocab}) * 3.0, -1);
}

TEST(BeamCandidates, EqualsAddAndTopkAtPegasusVocabulary) {
  const std::int64_t sources = 3, beams = 8, vocab = 96103;
  const auto log_probs = log_probs_of(sources * beams, vocab, 1);
  const auto beam_scores = -torch::rand({sources * beams}) * 20.0;
  const auto sums = (log_probs + beam_scores.unsqueeze(1)).view({sources, beams * vocab});
  auto [scores, ids] = torch::topk(sums, 2 * beams, 1, true, true);
  expect_same(top_candidates(log_probs, beam_scores, beams, 2 * beams), {scores, ids});
}

TEST(BeamCandidates, FirstStepRanksOnlyBeamZero) {
  // expand_to_beams: beam 0 at 0, the others at -1e9, every row the same log-probabilities.
  const std::int64_t sources = 2, beams = 4, vocab = 1000;
  const auto log_probs = log_probs_of(sources, vocab, 2).repeat_interleave(beams, 0);
  auto beam_scores = torch::zeros({sources, beams});
  beam_scores.narrow(1, 1, beams - 1).fill_(-1e9);
  beam_scores = beam_scores.view({-1});
  const auto top = top_candidates(log_probs, beam_scores, beams, 2 * beams);
  EXPECT_TRUE(top.ids.lt(vocab).all().item<bool>()) << top.ids;
  expect_same(top, sorted_reference(log_probs, beam_scores, beams, 2 * beams));
}

TEST(BeamCandidates, EqualScoresRankTheLowerIndexFirst) {
  // Few distinct values: most candidates tie, also across beams and with the k-th best.
  const std::int64_t sources = 3, beams = 3, vocab = 500;
  torch::manual_seed(3);
  const auto log_probs = -torch::randint(0, 4, {sources * beams, vocab}).to(torch::kFloat);
  const auto beam_scores = torch::tensor({0.0f, 0.0f, -1.0f, -2.0f, -1.0f, 0.0f, 0.0f, 0.0f, 0.0f});
  for (const std::int64_t k : std::vector<std::int64_t>{1, 2, 6, 37, beams * vocab}) {
    expect_same(top_candidates(log_probs, beam_scores, beams, k), sorted_reference(log_probs, beam_scores, beams, k));
  }
}

TEST(BeamCandidates, MaskedTokensAndNaN) {
  const std::int64_t sources = 2, beams = 2, vocab = 300;
  auto log_probs = log_probs_of(sources * beams, vocab, 4);
  log_probs.narrow(1, 0, 250).fill_(-std::numeric_limits<float>::infinity());  // min_length, no_repeat_ngram
  log_probs[2][299] = std::numeric_limits<float>::quiet_NaN();
  log_probs[3][7] = std::numeric_limits<float>::quiet_NaN();
  const auto beam_scores = torch::tensor({-1.0f, -3.0f, -0.5f, -0.25f});
  for (const std::int64_t k :
       std::vector<std::int64_t>{1, 4, 150, 400, beams * vocab}) {  // 400 and 600: into the -inf candidates
    expect_same(top_candidates(log_probs, beam_scores, beams, k), sorted_reference(log_probs, beam_scores, beams, k));
  }
}

TEST(BeamCandidates, OtherInputsTakeLibTorchsPathWithTheSameResult) {
  const std::int64_t sources = 2, beams = 4, vocab = 2000;
  const auto log_probs = log_probs_of(sources * beams, vocab, 5);
  const auto beam_scores = -torch::rand({sources * beams}) * 5.0;
  const auto want = top_candidates(log_probs, beam_scores, beams, 2 * beams);
  const auto strided = torch::empty({vocab, sources * beams}).t().copy_(log_probs);  // not contiguous
  ASSERT_FALSE(strided.is_contiguous());
  expect_same(top_candidates(strided, beam_scores, beams, 2 * beams), want);
  const auto doubled = top_candidates(log_probs.to(torch::kDouble), beam_scores.to(torch::kDouble), beams, 2 * beams);
  EXPECT_TRUE(torch::equal(doubled.ids, want.ids));
}

TEST(BeamCandidates, RefusesShapesThatDoNotFit) {
  const auto log_probs = torch::zeros({6, 10});
  EXPECT_THROW(top_candidates(log_probs, torch::zeros({6}), 4, 2), std::invalid_argument);   // 6 rows, 4 beams
  EXPECT_THROW(top_candidates(log_probs, torch::zeros({5}), 3, 2), std::invalid_argument);   // 5 scores
  EXPECT_THROW(top_candidates(log_probs, torch::zeros({6}), 3, 31), std::invalid_argument);  // 30 candidates
  EXPECT_THROW(top_candidates(log_probs, torch::zeros({6}), 3, 0), std::invalid_argument);
}

TEST(StepLogSoftmax, SameBitsAsLibTorchOnEveryThreadCount) {
  torch::manual_seed(23);
  // A beam-8 step of 4 sources over PEGASUS's vocabulary (rows shared between threads), an odd row count, rows too
  // few to share, masked tokens (-inf, as the logits processors write) and a row of -inf (NaN, as LibTorch gives).
  auto masked = torch::randn({5, 270001}) * 4;
  masked.index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, 100)}, -INFINITY);
  masked[3].fill_(-INFINITY);
  const std::vector<at::Tensor> inputs{torch::randn({32, 96103}) * 3, masked, torch::randn({1, 10}),
                                       torch::randn({64, 4096}).t()};
  const util::ThreadSettings before{at::get_num_threads(), util::blas_threads(), 0};
  for (const int threads : {1, 2, 3}) {
    util::apply_thread_settings({1, threads, 0});
    for (const auto& logits : inputs) {
      SCOPED_TRACE(testing::Message() << "threads " << threads << " logits " << logits.sizes());
      const auto expected = torch::log_softmax(logits, -1);
      const auto got = step_log_softmax(logits);
      EXPECT_TRUE(torch::equal(got.isnan(), expected.isnan()));
      EXPECT_TRUE(torch::equal(got.nan_to_num(0, 1e30, -1e30), expected.nan_to_num(0, 1e30, -1e30)));
    }
  }
  util::apply_thread_settings(before);
  // Other inputs: LibTorch's log_softmax, with its graph where one is recorded.
  const auto three = torch::randn({2, 3, 50000});
  EXPECT_TRUE(torch::equal(step_log_softmax(three), torch::log_softmax(three, -1)));
  const auto leaf = torch::randn({8, 50000}, torch::requires_grad());
  const auto out = step_log_softmax(leaf);
  ASSERT_TRUE(out.requires_grad());
  out.select(1, 0).sum().backward();
  EXPECT_TRUE(leaf.grad().defined());
}

}  // namespace
}  // namespace fitsum::generate
