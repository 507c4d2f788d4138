// kernels::linear's few-rows kernel against a double-precision product, with the error bound of its order of
// additions; results independent of the thread count; the inputs it leaves to LibTorch (autograd, a training
// module, too many rows, an inner dimension not a multiple of 16, other dtypes and layouts, a strided weight)
// computed by LibTorch's linear.
#include <algorithm>
#include <limits>
#include <tuple>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/kernels/few_rows_linear.h"
#include "fitsum/kernels/onednn_linear.h"
#include "fitsum/util/threads.h"

namespace fitsum::kernels {
namespace {

bool kernel_available() { return few_rows_kernel_applies(torch::zeros({1, 16}), torch::zeros({1, 16}), at::Tensor()); }

// |y - exact| <= (k / 16 + 5) * eps * (|x| |w|^T + |b|) + eps * |exact|: each of the 16 lanes adds k / 16 products
// in order, four levels of pairs add the lanes, one addition adds the bias, and the result is rounded to float.
void expect_within_bound(const at::Tensor& y, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const auto xd = x.to(torch::kDouble).reshape({-1, x.size(-1)});
  const auto wd = w.to(torch::kDouble);
  auto exact = torch::mm(xd, wd.t());
  auto magnitude = torch::mm(xd.abs(), wd.abs().t());
  if (b.defined()) {
    exact = exact + b.to(torch::kDouble);
    magnitude = magnitude + b.to(torch::kDouble).abs();
  }
  const double eps = std::numeric_limits<float>::epsilon();
  const auto bound = (static_cast<double>(w.size(1)) / 16 + 5) * eps * magnitude + eps * exact.abs();
  const auto error = (y.to(torch::kDouble).reshape(exact.sizes()) - exact).abs();
  const auto excess = (error - bound).max().item<double>();
  EXPECT_LE(excess, 0.0) << "largest error " << error.max().item<double>() << " against bound "
                         << bound.max().item<double>();
}

TEST(FewRowsLinear, MatchesExactProductWithinTheSummationBound) {
  if (!kernel_available()) GTEST_SKIP() << "no AVX-512F: linear() is LibTorch's linear";
  torch::manual_seed(7);
  // Rows around the 4-row tile and the limit; outputs around the 4-column groups; inner sizes of PEGASUS-small's
  // products (512, 2048) and the smallest allowed (16).
  for (const auto m : {1, 3, 4, 5, 8, 13, 31, 32}) {
    for (const auto n : {1, 3, 4, 7, 64, 517}) {
      for (const auto k : {16, 512, 2048}) {
        for (const bool with_bias : {false, true}) {
          SCOPED_TRACE(testing::Message() << "m " << m << " n " << n << " k " << k << " bias " << with_bias);
          const auto x = torch::randn({m, k});
          const auto w = torch::randn({n, k}) * 0.05;
          const auto b = with_bias ? torch::randn({n}) : at::Tensor();
          ASSERT_TRUE(few_rows_kernel_applies(x, w, b));
          const auto y = linear(x, w, b, false);
          ASSERT_EQ(y.sizes(), (std::vector<std::int64_t>{m, n}));
          expect_within_bound(y, x, w, b);
        }
      }
    }
  }
}

TEST(FewRowsLinear, EveryOutputInItsPlace) {
  if (!kernel_available()) GTEST_SKIP() << "no AVX-512F";
  // One-hot rows of x pick single weight entries: y[i][j] = w[j][i] + b[j] exactly, so a tile's lanes written to the
  // wrong row or column show as exact mismatches.
  const std::int64_t m = 9, n = 11, k = 16;
  const auto x = torch::eye(k).narrow(0, 0, m).contiguous();
  const auto w = torch::arange(n * k, torch::kFloat).reshape({n, k});
  const auto b = torch::arange(n, torch::kFloat) * 1000;
  const auto y = linear(x, w, b, false);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(y[i][j].item<float>(), w[j][i].item<float>() + b[j].item<float>()) << "row " << i << " column " << j;
    }
  }
}

TEST(FewRowsLinear, SameBitsForEveryThreadCount) {
  if (!kernel_available()) GTEST_SKIP() << "no AVX-512F";
  torch::manual_seed(3);
  const auto x = torch::randn({32, 512});
  const auto w = torch::randn({4099, 512});
  const auto b = torch::randn({4099});
  // The kernel runs on as many threads as the BLAS (or the intra-op pool, if wider): set both.
  const util::ThreadSettings before{at::get_num_threads(), util::blas_threads(), 0};
  util::apply_thread_settings({1, 1, 0});
  const auto one = linear(x, w, b, false);
  util::apply_thread_settings({2, 2, 0});
  const auto two = linear(x, w, b, false);
  util::apply_thread_settings({3, 3, 0});
  const auto three = linear(x, w, b, false);
  util::apply_thread_settings(before);
  EXPECT_TRUE(torch::equal(one, two));
  EXPECT_TRUE(torch::equal(one, three));
}

TEST(FewRowsLinear, LeadingDimensionsAndStridedInputs) {
  if (!kernel_available()) GTEST_SKIP() << "no AVX-512F";
  torch::manual_seed(5);
  const auto w = torch::randn({37, 64});
  const auto b = torch::randn({37});
  // (B, T, K) as a decoding step's hidden states; a transposed (non-contiguous) x.
  const auto x = torch::randn({4, 2, 64});
  const auto y = linear(x, w, b, false);
  ASSERT_EQ(y.sizes(), (std::vector<std::int64_t>{4, 2, 37}));
  expect_within_bound(y, x, w, b);
  const auto strided = torch::randn({64, 6}).t();
  ASSERT_FALSE(strided.is_contiguous());
  expect_within_bound(linear(strided, w, b, false), strided, w, b);
}

TEST(FewRowsLinear, LeavesOtherInputsToLibTorch) {
  torch::manual_seed(11);
  const auto x = torch::randn({8, 64});
  const auto w = torch::randn({16, 64});
  const auto b = torch::randn({16});
  EXPECT_FALSE(few_rows_kernel_applies(torch::randn({few_rows_limit + 1, 64}), w, b));
  EXPECT_FALSE(few_rows_kernel_applies(torch::randn({8, 24}), torch::randn({16, 24}), b));
  EXPECT_FALSE(few_rows_kernel_applies(x.to(torch::kDouble), w.to(torch::kDouble), b.to(torch::kDouble)));
  EXPECT_FALSE(few_rows_kernel_applies(x, torch::randn({64, 16}).t(), b));
  EXPECT_FALSE(few_rows_kernel_applies(x.to_sparse(), w, b));
  EXPECT_FALSE(few_rows_kernel_applies(x, w.to_sparse(), b));
  EXPECT_FALSE(few_rows_kernel_applies(x, w, torch::randn({16, 2}).select(1, 0)));
  // With autograd recording, LibTorch's linear: the result has a graph and gradients reach the weight.
  const auto weight = w.clone().requires_grad_(true);
  EXPECT_FALSE(few_rows_kernel_applies(x, weight, b));
  const auto y = linear(x, weight, b, false);
  ASSERT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(weight.grad(), x.sum(0).expand({16, 64})));
  // Without it, the kernel where the processor has it.
  torch::NoGradGuard no_grad;
  EXPECT_EQ(few_rows_kernel_applies(x, weight, b), kernel_available());
  // In a training module's forward (a checkpointed segment runs without a graph), the training product bit for bit.
  EXPECT_TRUE(torch::equal(linear(x, w, b, /*training=*/true), dense_linear(x, w, b)));
  // Whichever path, the same product as LibTorch's linear within the bound.
  for (const auto rows : {std::int64_t{8}, few_rows_limit + 1}) {
    const auto xi = torch::randn({rows, 64});
    expect_within_bound(linear(xi, w, b, false), xi, w, b);
    expect_within_bound(torch::nn::functional::linear(xi, w, b), xi, w, b);
  }
}

}  // namespace
}  // namespace fitsum::kernels
