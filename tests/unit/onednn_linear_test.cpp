// oneDNN's products for evaluation (kernels/onednn_linear.h) against double-precision products, within the error
// bound of a sum of k products in any order; every output in its place; what kernels::linear and kernels::matmul leave
// to LibTorch (autograd, training modules, other dtypes). Skipped where the build has no oneDNN or the processor
// no AVX-512 (there both functions are LibTorch's, which the last test checks).
#include <limits>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/kernels/few_rows_linear.h"
#include "fitsum/kernels/onednn_linear.h"
#include "fitsum/util/threads.h"

namespace fitsum::kernels {
namespace {

bool available() { return onednn_linear_applies(torch::zeros({64, 16}), torch::zeros({16, 16}), at::Tensor()); }

// |y - exact| <= (k + 2) * eps * (|a| |b| + |c|) + eps * |exact|: any order of k additions of products (the
// standard bound), the bias's addition, and the rounding to float. A wrong or misplaced output is off by about the
// products' magnitude, thousands of times this bound.
void expect_within_bound(const at::Tensor& y, const at::Tensor& exact, const at::Tensor& magnitude, std::int64_t k) {
  const double eps = std::numeric_limits<float>::epsilon();
  const auto bound = (static_cast<double>(k) + 2) * eps * magnitude + eps * exact.abs();
  const auto error = (y.to(torch::kDouble).reshape(exact.sizes()) - exact).abs();
  EXPECT_LE((error - bound).max().item<double>(), 0.0)
      << "largest error " << error.max().item<double>() << " against bound " << bound.max().item<double>();
}

void expect_linear_within_bound(const at::Tensor& y, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const auto xd = x.to(torch::kDouble).reshape({-1, x.size(-1)});
  const auto wd = w.to(torch::kDouble);
  auto exact = torch::mm(xd, wd.t());
  auto magnitude = torch::mm(xd.abs(), wd.abs().t());
  if (b.defined()) {
    exact = exact + b.to(torch::kDouble);
    magnitude = magnitude + b.to(torch::kDouble).abs();
  }
  expect_within_bound(y, exact, magnitude, w.size(1));
}

TEST(OneDnnLinear, MatchesExactProductWithinTheSummationBound) {
  if (!available()) GTEST_SKIP() << "no oneDNN in this build or no AVX-512: evaluation keeps LibTorch's products";
  torch::manual_seed(7);
  // Rows of a batch's encoder (and odd ones), PEGASUS-small's inner sizes and output widths, with and without bias.
  for (const auto m : {33, 100, 1024}) {
    for (const auto n : {1, 7, 512, 2051}) {
      for (const auto k : {5, 512, 2048}) {
        for (const bool with_bias : {false, true}) {
          SCOPED_TRACE(testing::Message() << "m " << m << " n " << n << " k " << k << " bias " << with_bias);
          const auto x = torch::randn({m, k});
          const auto w = torch::randn({n, k}) * 0.05;
          const auto b = with_bias ? torch::randn({n}) : at::Tensor();
          ASSERT_TRUE(onednn_linear_applies(x, w, b));
          const auto y = linear(x, w, b, false);
          ASSERT_EQ(y.sizes(), (std::vector<std::int64_t>{m, n}));
          expect_linear_within_bound(y, x, w, b);
        }
      }
    }
  }
}

TEST(OneDnnLinear, EveryOutputInItsPlace) {
  if (!available()) GTEST_SKIP() << "no oneDNN or no AVX-512";
  // One-hot rows of x pick single weight entries: y[i][j] = w[j][i % k] + b[j] exactly.
  const std::int64_t m = 70, n = 37, k = 48;
  const auto x = torch::eye(k).repeat({2, 1}).narrow(0, 0, m).contiguous().view({7, 10, k});
  const auto w = torch::arange(n * k, torch::kFloat).reshape({n, k});
  const auto b = torch::arange(n, torch::kFloat) * 10000;
  const auto y = onednn_linear(x, w, b).view({m, n});
  const auto expected = w.t().repeat({2, 1}).narrow(0, 0, m) + b;
  EXPECT_TRUE(torch::equal(y, expected));
}

TEST(OneDnnLinear, StridedInputAndLeadingDimensions) {
  if (!available()) GTEST_SKIP() << "no oneDNN or no AVX-512";
  torch::manual_seed(5);
  const auto w = torch::randn({37, 64});
  const auto b = torch::randn({37});
  const auto x = torch::randn({4, 50, 64});
  const auto y = linear(x, w, b, false);
  ASSERT_EQ(y.sizes(), (std::vector<std::int64_t>{4, 50, 37}));
  expect_linear_within_bound(y, x, w, b);
  const auto strided = torch::randn({64, 300}).t();
  ASSERT_FALSE(strided.is_contiguous());
  expect_linear_within_bound(linear(strided, w, b, false), strided, w, b);
  // Empty inputs: shapes only, and a bias alone where the inner dimension is empty.
  EXPECT_EQ(onednn_linear(torch::randn({0, 64}), w, b).sizes(), (std::vector<std::int64_t>{0, 37}));
  EXPECT_TRUE(torch::equal(onednn_linear(torch::randn({40, 0}), torch::randn({37, 0}), b), b.expand({40, 37})));
}

// a (..., M, K) b (..., K, N) in double, and |a| |b|.
void expect_matmul_within_bound(const at::Tensor& y, const at::Tensor& a, const at::Tensor& b) {
  const auto ad = a.to(torch::kDouble);
  const auto bd = b.to(torch::kDouble);
  expect_within_bound(y, torch::matmul(ad, bd), torch::matmul(ad.abs(), bd.abs()), a.size(-1));
}

TEST(OneDnnMatmul, AttentionsProductsWithinTheSummationBound) {
  if (!available()) GTEST_SKIP() << "no oneDNN or no AVX-512";
  torch::manual_seed(9);
  // (B, T, H, hd) split into heads as attention does: queries, keys and values are transposed views.
  const std::int64_t batch = 3, length = 70, heads = 4, width = 16;
  const auto heads_of = [&](const at::Tensor& t) { return t.view({batch, length, heads, width}).transpose(1, 2); };
  const auto query = heads_of(torch::randn({batch, length, heads * width}));
  const auto key = heads_of(torch::randn({batch, length, heads * width}));
  const auto value = heads_of(torch::randn({batch, length, heads * width}));
  const auto scores = matmul(query, key.transpose(-1, -2), false);
  ASSERT_EQ(scores.sizes(), (std::vector<std::int64_t>{batch, heads, length, length}));
  expect_matmul_within_bound(scores, query, key.transpose(-1, -2));
  const auto probs = torch::softmax(scores, -1);
  const auto context = matmul(probs, value, false);
  ASSERT_EQ(context.sizes(), (std::vector<std::int64_t>{batch, heads, length, width}));
  expect_matmul_within_bound(context, probs, value);
  // Contiguous operands, and the transpose of a contiguous tensor as the right one.
  const auto a = torch::randn({2, 5, 33, 40});
  const auto c = torch::randn({2, 5, 17, 40});
  expect_matmul_within_bound(onednn_matmul(a, c.transpose(-1, -2)), a, c.transpose(-1, -2));
  expect_matmul_within_bound(onednn_matmul(a, c.transpose(-1, -2).contiguous()), a, c.transpose(-1, -2));
}

TEST(OneDnnMatmul, EveryOutputInItsPlaceAndTheSameBitsForEveryThreadCount) {
  if (!available()) GTEST_SKIP() << "no oneDNN or no AVX-512";
  // Identity blocks on the left: each output is one entry of the right operand, exactly, in every batch entry.
  const std::int64_t items = 6, m = 24, n = 19;
  const auto left = torch::eye(m).expand({items, m, m}).contiguous();
  const auto right = torch::arange(items * m * n, torch::kFloat).reshape({items, n, m}).transpose(1, 2);
  EXPECT_TRUE(torch::equal(onednn_matmul(left, right), right));
  EXPECT_TRUE(torch::equal(onednn_matmul(left, right.contiguous()), right));
  // Each product on one thread: the same bits for any count.
  torch::manual_seed(4);
  const auto a = torch::randn({8, 64, 96});
  const auto b = torch::randn({8, 96, 80});
  // The products run on as many threads as the BLAS (or the intra-op pool, if wider): set both.
  const util::ThreadSettings before{at::get_num_threads(), util::blas_threads(), 0};
  util::apply_thread_settings({1, 1, 0});
  const auto one = onednn_matmul(a, b);
  util::apply_thread_settings({2, 2, 0});
  const auto two = onednn_matmul(a, b);
  util::apply_thread_settings({3, 3, 0});
  const auto three = onednn_matmul(a, b);
  util::apply_thread_settings(before);
  EXPECT_TRUE(torch::equal(one, two));
  EXPECT_TRUE(torch::equal(one, three));
}

TEST(OneDnnLinear, LeavesOtherInputsToLibTorch) {
  torch::manual_seed(11);
  const auto x = torch::randn({40, 64});
  const auto w = torch::randn({16, 64});
  const auto b = torch::randn({16});
  EXPECT_FALSE(onednn_linear_applies(x.to(torch::kDouble), w.to(torch::kDouble), b.to(torch::kDouble)));
  EXPECT_FALSE(onednn_linear_applies(x, torch::randn({64, 16}).t(), b));
  EXPECT_FALSE(onednn_linear_applies(x.to_sparse(), w, b));
  EXPECT_FALSE(onednn_linear_applies(x, w, torch::randn({16, 2}).select(1, 0)));
  EXPECT_FALSE(onednn_matmul_applies(torch::randn({2, 8, 4}), torch::randn({1, 4, 8})));  // broadcast
  EXPECT_FALSE(onednn_matmul_applies(torch::randn({8, 4}), torch::randn({4, 8})));        // no batch
  EXPECT_THROW(onednn_linear(x.to(torch::kDouble), w.to(torch::kDouble), at::Tensor()), std::invalid_argument);
  EXPECT_THROW(onednn_matmul(torch::randn({8, 4}), torch::randn({4, 8})), std::invalid_argument);
  // With autograd recording, LibTorch's products: the results have graphs and gradients reach the weight.
  const auto weight = w.clone().requires_grad_(true);
  EXPECT_FALSE(onednn_linear_applies(x, weight, b));
  const auto y = linear(x, weight, b, false);
  ASSERT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(weight.grad(), x.sum(0).expand({16, 64}), 1e-5, 1e-4));
  const auto a = torch::randn({2, 40, 8}, torch::requires_grad());
  EXPECT_FALSE(onednn_matmul_applies(a, torch::randn({2, 8, 40})));
  EXPECT_TRUE(matmul(a, torch::randn({2, 8, 40}), false).requires_grad());
  // In a training module's forward, the training products (dense_linear, dense_matmul) bit for bit.
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(linear(x, w, b, /*training=*/true), dense_linear(x, w, b)));
  const auto p = torch::randn({2, 3, 40, 8});
  const auto q = torch::randn({2, 3, 8, 40});
  EXPECT_TRUE(torch::equal(matmul(p, q, /*training=*/true), dense_matmul(p, q)));
  // Without a graph in evaluation, oneDNN where it is available, else LibTorch's: either within the bound.
  EXPECT_EQ(onednn_linear_applies(x, w, b), available());
  expect_linear_within_bound(linear(x, w, b, false), x, w, b);
  expect_matmul_within_bound(matmul(p, q, false), p, q);
}

// The training products: dense_linear's and dense_matmul's outputs and gradients against double precision (oneDNN's
// where available, LibTorch's elsewhere: the bound holds for both).
TEST(DenseProducts, LinearAndItsGradientsWithinTheBound) {
  torch::manual_seed(13);
  const auto x = torch::randn({3, 50, 64}).requires_grad_(true);
  const auto w = (torch::randn({37, 64}) * 0.1).requires_grad_(true);
  const auto b = torch::randn({37}).requires_grad_(true);
  const auto upstream = torch::randn({3, 50, 37});
  const auto y = dense_linear(x, w, b);
  ASSERT_EQ(y.sizes(), (std::vector<std::int64_t>{3, 50, 37}));
  (y * upstream).sum().backward();
  expect_linear_within_bound(y.detach(), x.detach(), w.detach(), b.detach());
  const auto g = upstream.reshape({-1, 37}).to(torch::kDouble);
  const auto x2 = x.detach().reshape({-1, 64}).to(torch::kDouble);
  const auto wd = w.detach().to(torch::kDouble);
  expect_within_bound(x.grad(), torch::mm(g, wd).view({3, 50, 64}), torch::mm(g.abs(), wd.abs()).view({3, 50, 64}), 37);
  expect_within_bound(w.grad(), torch::mm(g.t(), x2), torch::mm(g.abs().t(), x2.abs()), 150);
  expect_within_bound(b.grad(), g.sum(0), g.abs().sum(0), 150);
  // Without a bias, and a leaf that needs no gradient.
  const auto frozen = torch::randn({5, 64});
  const auto w2 = torch::randn({9, 64}).requires_grad_(true);
  dense_linear(frozen, w2, at::Tensor()).sum().backward();
  const auto ones = torch::ones({5, 9}, torch::kDouble);
  expect_within_bound(w2.grad(), torch::mm(ones.t(), frozen.to(torch::kDouble)),
                      torch::mm(ones.t(), frozen.to(torch::kDouble).abs()), 5);
}

TEST(DenseProducts, MatmulAndItsGradientsWithinTheBound) {
  torch::manual_seed(17);
  const auto a = torch::randn({2, 3, 20, 8}).requires_grad_(true);
  const auto key = torch::randn({2, 3, 30, 8}).requires_grad_(true);
  const auto upstream = torch::randn({2, 3, 20, 30});
  const auto y = dense_matmul(a, key.transpose(-1, -2));
  ASSERT_EQ(y.sizes(), (std::vector<std::int64_t>{2, 3, 20, 30}));
  (y * upstream).sum().backward();
  const auto ad = a.detach().to(torch::kDouble);
  const auto kd = key.detach().to(torch::kDouble);
  const auto g = upstream.to(torch::kDouble);
  expect_within_bound(y.detach(), torch::matmul(ad, kd.transpose(-1, -2)),
                      torch::matmul(ad.abs(), kd.abs().transpose(-1, -2)), 8);
  expect_within_bound(a.grad(), torch::matmul(g, kd), torch::matmul(g.abs(), kd.abs()), 30);
  expect_within_bound(key.grad(), torch::matmul(g.transpose(-1, -2), ad),
                      torch::matmul(g.abs().transpose(-1, -2), ad.abs()), 20);
}

TEST(DenseProducts, MmAndAddmmOnTransposedAndNarrowedOperands) {
  torch::manual_seed(19);
  const auto a = torch::randn({64, 40});  // used as a^T (40 x 64)
  const auto b = torch::randn({64, 33});
  const auto exact = torch::mm(a.t().to(torch::kDouble), b.to(torch::kDouble));
  const auto magnitude = torch::mm(a.t().abs().to(torch::kDouble), b.abs().to(torch::kDouble));
  expect_within_bound(dense_mm(a.t(), b), exact, magnitude, 64);
  // Accumulated into rows 10..49 of a larger buffer: the rest untouched.
  auto buffer = torch::ones({60, 33});
  dense_addmm_(buffer.narrow(0, 10, 40), a.t(), b);
  expect_within_bound(buffer.narrow(0, 10, 40), exact + 1.0, magnitude + 1.0, 65);
  EXPECT_TRUE(torch::equal(buffer.narrow(0, 0, 10), torch::ones({10, 33})));
  EXPECT_TRUE(torch::equal(buffer.narrow(0, 50, 10), torch::ones({10, 33})));
  // A (1, N) bias row broadcast over the rows, as the loss's final_logits_bias.
  const auto bias = torch::randn({1, 33});
  expect_within_bound(dense_addmm(bias, a.t(), b), exact + bias.to(torch::kDouble),
                      magnitude + bias.abs().to(torch::kDouble), 65);
}

}  // namespace
}  // namespace fitsum::kernels
