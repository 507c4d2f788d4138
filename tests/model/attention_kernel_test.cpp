// The attention fitsum compiles in (at::scaled_dot_product_attention with LibTorch >= 2.1, FITSUM_HAS_SDPA; fitsum's
// own products and softmax with 1.13) against the formula written out here in double precision:
// softmax(scale * Q K^T + mask) V per head, then out_proj. Values and the gradients of the hidden states, the
// key/value source, the mask (T5's position bias is trained) and every projection, for PEGASUS/BART's scaled
// attention with padding, T5's unscaled attention with a position bias, cross-attention and beam search's grouped
// rows; bf16 autocast within its bound; what dropout can be checked of on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fitsum/model/seq2seq.h"
#include "fitsum/util/torch_compat.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

// float32 against the double-precision formula, relative to the reference's largest entry: the products sum at
// most a few dozen terms here, so float32's rounding stays near 1e-6 of that magnitude.
constexpr double kFloat32Bound = 1e-5;
// bf16 autocast (the products' operands rounded to 8 significant bits, softmax and the mask in float32): measured
// up to about 1.5e-2 of the largest entry (values) and 2.5e-2 (gradients) on these problems; documented bound 5e-2.
constexpr double kBf16Bound = 5e-2;

struct Problem {
  torch::Tensor x;      // (B, T, D) queries' hidden states
  torch::Tensor kv;     // (B / group, S, D); undefined: self-attention over x
  torch::Tensor mask;   // additive, broadcastable to (B / group, H, T, S), or undefined
  bool mask_grad = false;  // the mask is trained (T5's position bias)
  std::int64_t group = 1;  // query rows per key/value row (AttentionCache::group, beam search)
};

// Output and gradients by name: "x", "kv", "mask", "q.weight", "q.bias", ... "o.weight".
using Results = std::map<std::string, torch::Tensor>;

const std::vector<std::pair<std::string, torch::nn::Linear model::AttentionImpl::*>> kProjections = {
    {"q", &model::AttentionImpl::q_proj},
    {"k", &model::AttentionImpl::k_proj},
    {"v", &model::AttentionImpl::v_proj},
    {"o", &model::AttentionImpl::out_proj}};

// The module's forward (forward_cross_cached for grouped rows) and, when `grads`, backward of sum(out * upstream).
Results run_fitsum(model::Attention& attention, const Problem& p, const torch::Tensor& upstream, bool grads) {
  attention->zero_grad();
  const auto x = p.x.clone().requires_grad_(grads);
  const auto kv = p.kv.defined() ? p.kv.clone().requires_grad_(grads) : torch::Tensor();
  const auto mask = p.mask.defined() ? p.mask.clone().requires_grad_(grads && p.mask_grad) : torch::Tensor();
  torch::Tensor out;
  if (p.group > 1) {
    model::AttentionCache cache;
    cache.group = p.group;
    out = attention->forward_cross_cached(x, kv, mask, cache);
  } else {
    out = attention->forward(x, kv.defined() ? kv : x, mask);
  }
  Results r{{"out", out.detach()}};
  if (!grads) return r;
  (out * upstream).sum().backward();
  r["x"] = x.grad();
  if (kv.defined()) r["kv"] = kv.grad();
  if (mask.requires_grad()) r["mask"] = mask.grad();
  for (const auto& [name, member] : kProjections) {
    const auto& linear = (*attention).*member;
    r[name + ".weight"] = linear->weight.grad();
    if (linear->bias.defined()) r[name + ".bias"] = linear->bias.grad();
  }
  return r;
}

// softmax(scale * Q K^T + mask) V per head, then out_proj, in double precision, with the module's weights.
Results run_reference(model::Attention& attention, const Problem& p, std::int64_t heads, double scale,
                      const torch::Tensor& upstream) {
  const auto leaf = [](const torch::Tensor& t) {
    return t.defined() ? t.detach().to(torch::kDouble).requires_grad_(true) : torch::Tensor();
  };
  std::map<std::string, torch::Tensor> w;
  for (const auto& [name, member] : kProjections) {
    const auto& linear = (*attention).*member;
    w[name + ".weight"] = leaf(linear->weight);
    if (linear->bias.defined()) w[name + ".bias"] = leaf(linear->bias);
  }
  const auto project = [&](const std::string& name, const torch::Tensor& in) {
    auto y = torch::matmul(in, w[name + ".weight"].t());
    return w.count(name + ".bias") ? y + w[name + ".bias"] : y;
  };
  const auto x = leaf(p.x);
  const auto kv = p.kv.defined() ? leaf(p.kv) : x;
  const auto mask = p.mask.defined() ? leaf(p.mask) : torch::Tensor();
  const auto heads_of = [&](const torch::Tensor& t) {  // (N, L, H * hd) -> (N, H, L, hd)
    return t.view({t.size(0), t.size(1), heads, -1}).transpose(1, 2);
  };
  const auto q = heads_of(project("q", x));
  // Grouped rows: query row i attends over key/value row i / group, as if that row were repeated group times.
  auto k = heads_of(project("k", kv)).repeat_interleave(p.group, 0);
  auto v = heads_of(project("v", kv)).repeat_interleave(p.group, 0);
  auto scores = scale * torch::matmul(q, k.transpose(-1, -2));
  if (mask.defined()) scores = scores + (mask.size(0) > 1 ? mask.repeat_interleave(p.group, 0) : mask);
  auto context = torch::matmul(torch::softmax(scores, -1), v);  // (B, H, T, hd)
  context = context.transpose(1, 2).reshape({x.size(0), x.size(1), -1});
  const auto out = project("o", context);
  (out * upstream.to(torch::kDouble)).sum().backward();
  Results r{{"out", out.detach()}, {"x", x.grad()}};
  if (p.kv.defined()) r["kv"] = kv.grad();
  if (p.mask_grad) r["mask"] = mask.grad();
  for (const auto& [name, t] : w) r[name] = t.grad();
  return r;
}

void expect_results_close(const Results& got, const Results& want, double bound, const std::string& what) {
  for (const auto& [name, expected] : want) {
    const auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": no " << name;
    ASSERT_TRUE(it->second.defined()) << what << ": no gradient of " << name;
    if (name == "k.bias") {
      // Exactly 0 in exact arithmetic (a constant added to every score of a row leaves its softmax as it is), so
      // only rounding remains: judged against the magnitude of its sibling, the value bias's gradient.
      const auto magnitude = want.at("v.bias").abs().max().item<double>();
      EXPECT_CLOSE(it->second.to(torch::kDouble), expected, absolute(bound * magnitude)) << what << ": " << name;
      continue;
    }
    EXPECT_CLOSE(it->second.to(torch::kDouble), expected, relative(bound)) << what << ": " << name;
  }
}

// Weights of a spread that makes the softmax far from uniform (scores of a few units).
void randomize(model::Attention& attention) {
  torch::NoGradGuard no_grad;
  for (auto& p : attention->parameters()) p.normal_(0.0, 0.4);
}

// Values in training mode (dropout 0) and in evaluation (where 1.13's build takes other kernels for few query
// rows), and gradients, against the reference.
void check(model::Attention& attention, const Problem& p, std::int64_t heads, double scale, const std::string& what) {
  const auto rows = p.x.size(0);
  const auto upstream = torch::randn({rows, p.x.size(1), p.x.size(2)});
  const auto want = run_reference(attention, p, heads, scale, upstream);
  attention->train();
  expect_results_close(run_fitsum(attention, p, upstream, true), want, kFloat32Bound, what + " (training)");
  attention->eval();
  {
    torch::NoGradGuard no_grad;
    expect_results_close(run_fitsum(attention, p, upstream, false), {{"out", want.at("out")}}, kFloat32Bound,
                         what + " (evaluation)");
  }
  attention->train();
}

// attention_mask rows of 1s then 0s, one length per row.
torch::Tensor padding_of(const std::vector<std::int64_t>& lengths, std::int64_t length) {
  auto am = torch::zeros({static_cast<std::int64_t>(lengths.size()), length}, torch::kLong);
  for (std::size_t i = 0; i < lengths.size(); ++i) am[static_cast<std::int64_t>(i)].narrow(0, 0, lengths[i]).fill_(1);
  return model::padding_mask(am, torch::kFloat);
}

TEST(AttentionKernel, ScaledSelfAttentionWithPaddingMatchesTheFormula) {
  torch::manual_seed(21);
  const std::int64_t d_model = 24, heads = 3, length = 7;
  model::Attention attention(d_model, heads, 0.0);
  randomize(attention);
  const double scale = 1.0 / std::sqrt(8.0);
  Problem p;
  p.x = torch::randn({3, length, d_model});
  p.mask = padding_of({7, 5, 2}, length);  // (3, 1, 1, 7): rows padded differently
  check(attention, p, heads, scale, "encoder self-attention");
  // A decoder's: causal and padding together, (3, 1, 7, 7).
  p.mask = p.mask + model::causal_mask(length, 0, torch::kFloat, torch::kCPU);
  check(attention, p, heads, scale, "causal self-attention");
}

TEST(AttentionKernel, CrossAttentionMatchesTheFormula) {
  torch::manual_seed(22);
  const std::int64_t d_model = 32, heads = 4;
  model::Attention attention(d_model, heads, 0.0);
  randomize(attention);
  Problem p;
  p.x = torch::randn({2, 5, d_model});
  p.kv = torch::randn({2, 11, d_model});
  p.mask = padding_of({11, 6}, 11);
  check(attention, p, heads, 1.0 / std::sqrt(8.0), "cross-attention");
}

TEST(AttentionKernel, T5UnscaledAttentionWithPositionBiasMatchesTheFormula) {
  torch::manual_seed(23);
  // T5's inner width (heads x d_kv = 24) differs from d_model (16), and q, k, v, o have no biases.
  const std::int64_t d_model = 16, heads = 4, length = 9;
  model::Attention attention(model::AttentionShape{d_model, heads, 6, 0.0, model::ModuleLayout::blocks, false, false});
  randomize(attention);
  ASSERT_FALSE(attention->q_proj->bias.defined());
  Problem p;
  p.x = torch::randn({2, length, d_model});
  // The stack's mask: the position bias (1, H, T, T), trained, plus the padding (B, 1, 1, T).
  p.mask = torch::randn({1, heads, length, length}) + padding_of({9, 4}, length);
  p.mask_grad = true;
  check(attention, p, heads, 1.0, "T5 self-attention");
}

TEST(AttentionKernel, GroupedRowsOfBeamSearchMatchTheFormula) {
  torch::manual_seed(24);
  const std::int64_t d_model = 24, heads = 2, group = 3;
  model::Attention attention(d_model, heads, 0.0);
  randomize(attention);
  Problem p;
  p.group = group;
  p.kv = torch::randn({2, 13, d_model});  // two sources
  p.mask = padding_of({13, 8}, 13);       // one row per source
  for (const std::int64_t length : {1, 2}) {  // a decoding step's one position, and two
    p.x = torch::randn({2 * group, length, d_model});
    check(attention, p, heads, 1.0 / std::sqrt(12.0), "grouped rows, " + std::to_string(length) + " positions");
  }
}

TEST(AttentionKernel, Bf16AutocastStaysWithinItsBound) {
  torch::manual_seed(25);
  const std::int64_t d_model = 32, heads = 4;
  model::Attention attention(d_model, heads, 0.0);
  randomize(attention);
  Problem p;
  p.x = torch::randn({2, 6, d_model});
  p.kv = torch::randn({2, 10, d_model});
  p.mask = padding_of({10, 3}, 10);
  const auto upstream = torch::randn({2, 6, d_model});
  const auto want = run_reference(attention, p, heads, 1.0 / std::sqrt(8.0), upstream);
  Results got;
  {
    util::AutocastGuard autocast(c10::DeviceType::CPU, torch::kBFloat16);
    got = run_fitsum(attention, p, upstream, true);
  }
  EXPECT_EQ(got.at("out").scalar_type(), torch::kBFloat16);
  expect_results_close(got, want, kBf16Bound, "bf16 autocast");
  // The bound is bf16's, not a loose float32 one: the float32 result is 100x closer.
  attention->zero_grad();
  const auto float32 = run_fitsum(attention, p, upstream, false).at("out").to(torch::kDouble);
  const auto scale = want.at("out").abs().max().item<double>();
  const auto bf16_error = (got.at("out").to(torch::kDouble) - want.at("out")).abs().max().item<double>() / scale;
  const auto float32_error = (float32 - want.at("out")).abs().max().item<double>() / scale;
  EXPECT_GT(bf16_error, 1e-3);
  EXPECT_LT(float32_error, bf16_error / 100);
}

// Attention dropout drops probabilities and scales the kept ones by 1 / (1 - p), as torch.nn.functional.dropout
// (HF eager) and SDPA's dropout_p do. The masks come from each build's own generator: on CUDA, SDPA's kernels draw
// from another random stream than HF eager's dropout of the probabilities (HF's own "sdpa" attention does the same),
// so runs agree in distribution, not draw for draw.
TEST(AttentionKernel, DropoutDropsProbabilitiesAndKeepsTheExpectation) {
  torch::manual_seed(26);
  const std::int64_t keys = 8, rows = 2048;
  const double rate = 0.25;
  // Uniform probabilities (zero q and k projections) over one-hot values: the output is the dropped probabilities.
  model::Attention attention(model::AttentionShape{keys, 1, 0, rate});
  {
    torch::NoGradGuard no_grad;
    for (auto& p : attention->parameters()) p.zero_();
    attention->v_proj->weight.copy_(torch::eye(keys));
    attention->out_proj->weight.copy_(torch::eye(keys));
  }
  const auto x = torch::randn({rows, 1, keys});
  const auto kv = torch::eye(keys).unsqueeze(0).expand({rows, keys, keys}).contiguous();
  attention->eval();
  const auto eval_out = attention->forward(x, kv, {}).detach();
  EXPECT_CLOSE(eval_out, torch::full_like(eval_out, 1.0 / keys), relative(1e-6));
  attention->train();
  const auto out = attention->forward(x, kv, {}).detach();
  const auto dropped = out.eq(0).to(torch::kDouble).mean().item<double>();
  // 16384 draws of rate 0.25: standard deviation 0.0034.
  EXPECT_NEAR(dropped, rate, 0.02);
  const auto kept = out.masked_select(out.ne(0));
  EXPECT_CLOSE(kept, torch::full_like(kept, 1.0 / keys / (1.0 - rate)), relative(1e-6));
  // The expectation is the evaluation output: each output's mean over the rows (standard error 0.0016 of 0.125).
  EXPECT_CLOSE(out.mean(0).to(torch::kDouble), eval_out.mean(0).to(torch::kDouble), relative(0.07));
  // A rate of 0 in training is evaluation: bit for bit with SDPA (the same kernel); 1.13's math path takes other
  // products in evaluation (oneDNN's, or the few-rows kernels), equal up to float32 rounding.
  model::Attention plain(model::AttentionShape{keys, 1, 0, 0.0});
  randomize(plain);
  const auto xs = torch::randn({3, 5, keys});
  const auto trained = plain->forward(xs, xs, {}).detach();
  plain->eval();
  const auto evaluated = plain->forward(xs, xs, {}).detach();
#if FITSUM_HAS_SDPA
  EXPECT_TRUE(torch::equal(trained, evaluated));
#else
  EXPECT_CLOSE(trained, evaluated, relative(kFloat32Bound));
#endif
}

}  // namespace
}  // namespace fitsum::test
