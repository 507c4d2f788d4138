// The attention products of a decoding step on the few-rows kernels (kernels::few_rows_scores, few_rows_context)
// against double-precision products, with the error bounds of their orders of additions; results independent of
// the thread count; the inputs they leave to LibTorch's matmul (autograd, too many query rows, widths not a multiple
// of 16, broadcast leading dimensions, other dtypes).
#include <limits>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/kernels/few_rows_linear.h"
#include "fitsum/util/threads.h"

namespace fitsum::kernels {
namespace {

bool kernels_available() {
  const auto t = torch::zeros({1, 1, 16});
  return few_rows_attention_applies(t, t, t);
}

// |y - exact| <= (terms + 5) * eps * |a| |b| + eps * |exact|, where each output adds `terms` products in order
// (per lane for the scores, then four levels of pairs) and is rounded to float once more.
void expect_within_bound(const at::Tensor& y, const at::Tensor& exact, const at::Tensor& magnitude, double terms) {
  const double eps = std::numeric_limits<float>::epsilon();
  const auto bound = (terms + 5) * eps * magnitude + eps * exact.abs();
  const auto error = (y.to(torch::kDouble) - exact).abs();
  const auto excess = (error - bound).max().item<double>();
  EXPECT_LE(excess, 0.0) << "largest error " << error.max().item<double>() << " against bound "
                         << bound.max().item<double>();
}

TEST(FewRowsAttention, MatchesExactProductsWithinTheSummationBounds) {
  if (!kernels_available()) GTEST_SKIP() << "no AVX-512F: attention keeps LibTorch's products";
  torch::manual_seed(13);
  // Query rows around the 4-row tile and the limit (1: a step's self-attention; 8: a source's beams in
  // cross-attention); key positions around the 4-column groups; head widths 16, 64 (PEGASUS) and 80 (a 64-block and
  // a 16-block).
  for (const auto m : {1, 3, 4, 8, 13, 32}) {
    for (const auto n : {1, 7, 200}) {
      for (const auto d : {16, 64, 80}) {
        SCOPED_TRACE(testing::Message() << "m " << m << " n " << n << " d " << d);
        const auto query = torch::randn({2, 3, m, d});
        const auto key = torch::randn({2, 3, n, d});
        const auto value = torch::randn({2, 3, n, d});
        ASSERT_TRUE(few_rows_attention_applies(query, key, value));
        const auto scores = few_rows_scores(query, key);
        ASSERT_EQ(scores.sizes(), (std::vector<std::int64_t>{2, 3, m, n}));
        const auto qd = query.to(torch::kDouble);
        const auto kd = key.to(torch::kDouble);
        expect_within_bound(scores, torch::matmul(qd, kd.transpose(-1, -2)),
                            torch::matmul(qd.abs(), kd.abs().transpose(-1, -2)), d / 16.0);
        const auto probs = torch::softmax(scores, -1);
        const auto context = few_rows_context(probs, value);
        ASSERT_EQ(context.sizes(), (std::vector<std::int64_t>{2, 3, m, d}));
        const auto pd = probs.to(torch::kDouble);
        const auto vd = value.to(torch::kDouble);
        expect_within_bound(context, torch::matmul(pd, vd), torch::matmul(pd.abs(), vd.abs()), n);
      }
    }
  }
}

TEST(FewRowsAttention, EveryOutputInItsPlace) {
  if (!kernels_available()) GTEST_SKIP() << "no AVX-512F";
  // One-hot queries pick single key entries and one-hot probabilities single value rows, exactly: outputs written
  // to the wrong batch entry, row or column show as exact mismatches.
  const std::int64_t batch = 3, m = 6, n = 9, d = 80;
  const auto query = torch::zeros({batch, m, d});
  const auto probs = torch::zeros({batch, m, n});
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < m; ++i) {
      query[b][i][(b + 5 * i) % d] = 1;
      probs[b][i][(b + 2 * i) % n] = 1;
    }
  }
  const auto key = torch::arange(batch * n * d, torch::kFloat).reshape({batch, n, d});
  const auto value = torch::arange(batch * n * d, torch::kFloat).reshape({batch, n, d}) * -1;
  ASSERT_TRUE(few_rows_attention_applies(query, key, value));
  EXPECT_TRUE(torch::equal(few_rows_scores(query, key), torch::matmul(query, key.transpose(-1, -2))));
  EXPECT_TRUE(torch::equal(few_rows_context(probs, value), torch::matmul(probs, value)));
}

TEST(FewRowsAttention, SameBitsForEveryThreadCount) {
  if (!kernels_available()) GTEST_SKIP() << "no AVX-512F";
  torch::manual_seed(17);
  // 4 sources x 8 heads of 8 beams over 200 source positions: wide enough to run on several threads.
  const auto query = torch::randn({4, 8, 8, 64});
  const auto key = torch::randn({4, 8, 200, 64});
  const auto value = torch::randn({4, 8, 200, 64});
  const util::ThreadSettings before{at::get_num_threads(), util::blas_threads(), 0};
  std::vector<at::Tensor> scores, contexts;
  for (const int threads : {1, 2, 3}) {
    util::apply_thread_settings({threads, threads, 0});
    scores.push_back(few_rows_scores(query, key));
    contexts.push_back(few_rows_context(torch::softmax(scores.back(), -1), value));
  }
  util::apply_thread_settings(before);
  for (std::size_t i = 1; i < scores.size(); ++i) {
    EXPECT_TRUE(torch::equal(scores[0], scores[i]));
    EXPECT_TRUE(torch::equal(contexts[0], contexts[i]));
  }
}

TEST(FewRowsAttention, NonContiguousInputs) {
  if (!kernels_available()) GTEST_SKIP() << "no AVX-512F";
  torch::manual_seed(19);
  // Heads split from (B, T, H, hd) by a transpose, as the model's queries are.
  const auto query = torch::randn({2, 5, 4, 32}).transpose(1, 2);
  const auto key = torch::randn({2, 7, 4, 32}).transpose(1, 2);
  const auto value = torch::randn({2, 7, 4, 32}).transpose(1, 2);
  ASSERT_FALSE(query.is_contiguous());
  ASSERT_TRUE(few_rows_attention_applies(query, key, value));
  const auto scores = few_rows_scores(query, key);
  EXPECT_TRUE(torch::allclose(scores, torch::matmul(query, key.transpose(-1, -2)), 1e-5, 1e-5));
  const auto probs = torch::softmax(scores, -1).transpose(-1, -2).contiguous().transpose(-1, -2);
  EXPECT_TRUE(torch::allclose(few_rows_context(probs, value), torch::matmul(probs, value), 1e-5, 1e-5));
}

TEST(FewRowsAttention, LeavesOtherInputsToLibTorch) {
  const auto t = [](std::vector<std::int64_t> sizes) { return torch::randn(sizes); };
  EXPECT_FALSE(few_rows_attention_applies(t({2, few_rows_limit + 1, 64}), t({2, 5, 64}), t({2, 5, 64})));
  EXPECT_FALSE(few_rows_attention_applies(t({2, 4, 24}), t({2, 5, 24}), t({2, 5, 64})));
  EXPECT_FALSE(few_rows_attention_applies(t({2, 4, 64}), t({2, 5, 64}), t({2, 5, 24})));
  EXPECT_FALSE(few_rows_attention_applies(t({2, 4, 64}), t({2, 5, 64}), t({2, 6, 64})));
  EXPECT_FALSE(few_rows_attention_applies(t({2, 4, 64}), t({1, 5, 64}), t({1, 5, 64})));  // broadcast
  EXPECT_FALSE(few_rows_attention_applies(t({4, 64}), t({5, 64}), t({5, 64})));           // no batch dimension
  const auto q = t({2, 4, 64}).to(torch::kDouble);
  EXPECT_FALSE(few_rows_attention_applies(q, q, q));
  // With autograd recording, LibTorch's products (their gradients are needed).
  const auto key = t({2, 5, 64}).requires_grad_(true);
  EXPECT_FALSE(few_rows_attention_applies(t({2, 4, 64}), key, t({2, 5, 64})));
  torch::NoGradGuard no_grad;
  EXPECT_EQ(few_rows_attention_applies(t({2, 4, 64}), key, t({2, 5, 64})), kernels_available());
}

}  // namespace
}  // namespace fitsum::kernels
