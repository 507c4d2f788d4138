// T5's building blocks (model/t5_layers.h) on their own: relative-position buckets against the values transformers
// computes (tests/data/t5_relative_buckets.json, written by tests/data/make_family_fixtures.py), the bias a cached
// decoding step sees, RMSNorm and the two feed-forward variants against their formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/model/t5_layers.h"
#include "fitsum/util/files.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

TEST(T5Layers, RelativePositionBucketsMatchTransformers) {
  const auto table = util::read_json_file(source_dir() / "tests" / "data" / "t5_relative_buckets.json");
  const auto relative = torch::tensor(table["relative_positions"].get<std::vector<std::int64_t>>(), torch::kLong);
  ASSERT_EQ(table["cases"].size(), 4u);
  for (const auto& c : table["cases"]) {
    const auto got =
        model::relative_position_bucket(relative, c["bidirectional"].get<bool>(), c["num_buckets"].get<std::int64_t>(),
                                        c["max_distance"].get<std::int64_t>());
    const auto want = torch::tensor(c["buckets"].get<std::vector<std::int64_t>>(), torch::kLong);
    EXPECT_TRUE(torch::equal(got, want)) << c["num_buckets"] << "/" << c["max_distance"] << " bidirectional "
                                         << c["bidirectional"];
  }
}

TEST(T5Layers, CachedStepSeesTheLastRowOfTheFullBias) {
  torch::manual_seed(3);
  model::RelativePositionBias causal(8, 20, 3, /*bidirectional=*/false);
  const auto full = causal->forward(6, 0);  // (1, 3, 6, 6)
  ASSERT_EQ(full.sizes().vec(), (std::vector<std::int64_t>{1, 3, 6, 6}));
  const auto step = causal->forward(1, 5);  // the sixth position alone, over six keys
  EXPECT_TRUE(torch::equal(step, full.narrow(2, 5, 1)));
  // Causal: a key in the future shares the bucket of distance 0.
  EXPECT_TRUE(torch::equal(full.select(2, 0).select(2, 3), full.select(2, 0).select(2, 0)));
}

TEST(T5Layers, RmsNormHasNoMeanAndNoBias) {
  model::RMSNorm norm(2, 1e-6);
  torch::NoGradGuard no_grad;
  norm->weight.copy_(torch::tensor({2.0f, 0.5f}));
  const auto x = torch::tensor({{3.0f, 4.0f}});  // mean of squares 12.5
  const auto want = torch::tensor({{2.0 * 3.0 / std::sqrt(12.5 + 1e-6), 0.5 * 4.0 / std::sqrt(12.5 + 1e-6)}});
  EXPECT_CLOSE(norm->forward(x).to(torch::kDouble), want, relative(1e-6));
  norm->to(torch::kBFloat16);
  EXPECT_EQ(norm->forward(x).scalar_type(), torch::kBFloat16);  // T5LayerNorm returns the weight's half dtype
}

// The fused RMSNorm (one autograd node) against the plain operations: output, both gradients and dtypes, for float32
// and bfloat16 inputs and weights; and what its forward keeps for backward.
TEST(T5Layers, FusedRmsNormEqualsThePlainOperationsAndKeepsLess) {
  for (const auto x_dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const auto w_dtype : {torch::kFloat, torch::kBFloat16}) {
      const auto what = std::string("x ") + c10::toString(x_dtype) + ", weight " + c10::toString(w_dtype);
      torch::manual_seed(11);
      const auto x0 = (torch::randn({3, 5, 16}) * 3.0).to(x_dtype);
      const auto w0 = (1.0 + 0.3 * torch::randn({16})).to(w_dtype);
      const auto grad = torch::randn({3, 5, 16});
      std::vector<torch::Tensor> results;
      for (const bool fused : {true, false}) {
        model::RMSNorm norm(16, 1e-6);
        norm->fused = fused;
        norm->weight.set_data(w0.clone());
        const auto x = x0.clone().requires_grad_(true);
        const auto out = norm->forward(x);
        out.backward(grad.to(out.scalar_type()));
        results.insert(results.end(), {out, x.grad(), norm->weight.grad()});
      }
      const bool bf16 = x_dtype == torch::kBFloat16 || w_dtype == torch::kBFloat16;
      for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(results[i].scalar_type(), results[i + 3].scalar_type()) << what << " result " << i;
        EXPECT_CLOSE(results[i].to(torch::kDouble), results[i + 3].to(torch::kDouble), relative(bf16 ? 1e-2 : 1e-5))
            << what << " result " << i << " (output, x's gradient, weight's gradient)";
      }
    }
  }
  // Kept for backward, beyond the output: the fused node only the (3, 512, 1) float32 reciprocal RMS; the plain
  // operations also the normalized (3, 512, 256) input.
  auto& allocator = memory::TrackingCpuAllocator::instance();
  const auto x = torch::randn({3, 512, 256}).requires_grad_(true);
  std::vector<std::int64_t> kept;
  for (const bool fused : {true, false}) {
    model::RMSNorm norm(256, 1e-6);
    norm->fused = fused;
    const auto before = allocator.current_bytes();
    const auto out = norm->forward(x);
    kept.push_back(allocator.current_bytes() - before - out.nbytes());
  }
  EXPECT_LE(kept[0], 3 * 512 * 4 + 4096);
  EXPECT_GE(kept[1], 3 * 512 * 256 * 4);
}

TEST(T5Layers, FeedForwardVariantsFollowTheirFormulas) {
  torch::manual_seed(5);
  const auto x = torch::randn({2, 3, 8});
  model::T5FeedForward relu(8, 16, false);
  model::T5FeedForward gated(8, 16, true);
  EXPECT_TRUE(relu->named_parameters().contains("wi.weight"));
  EXPECT_FALSE(relu->named_parameters().contains("wi.bias"));
  EXPECT_TRUE(gated->named_parameters().contains("wi_0.weight"));
  EXPECT_TRUE(gated->named_parameters().contains("wi_1.weight"));
  const auto relu_want = torch::matmul(torch::relu(torch::matmul(x, relu->wi->weight.t())), relu->wo->weight.t());
  EXPECT_CLOSE(relu->forward(x, 0.0, false), relu_want, relative(1e-6));
  // gelu_new, written out as transformers' NewGELUActivation.
  const auto a = torch::matmul(x, gated->wi_0->weight.t());
  const auto gelu_new = 0.5 * a * (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * torch::pow(a, 3.0))));
  const auto gated_want = torch::matmul(gelu_new * torch::matmul(x, gated->wi_1->weight.t()), gated->wo->weight.t());
  EXPECT_CLOSE(gated->forward(x, 0.0, false), gated_want, relative(1e-5));
}

}  // namespace
}  // namespace fitsum::test
