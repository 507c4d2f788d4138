// The fast paths of a training step against the plain ones they replace: in-place gradients of the tied embedding
// against autograd's embedding backward, the fused LM head + cross-entropy against full logits and
// label_loss_sum (label smoothing, -100 labels, both plans), the fused optimizer kernels against the tensor-op
// formulas, and the byte-mask dropout against its definition. Timings live in bench/, never here.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/io/hf_config.h"
#include "fitsum/kernels/dropout.h"
#include "fitsum/kernels/feed_forward.h"
#include "fitsum/kernels/few_rows_linear.h"
#include "fitsum/kernels/loss.h"
#include "fitsum/kernels/tied_embedding.h"
#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/optim/optimizer_step.h"
#include "fitsum/optim/optimizers.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

model::ModelConfig small_config(std::int64_t padding_idx) {
  auto c = io::read_model_config(source_dir() / "tests" / "data" / "fixtures" / "odd-pegasus");
  c.embedding_padding_idx = padding_idx;
  return c;
}

struct Batch {
  torch::Tensor ids, mask, labels;
};

// Padding in the sources, -100 in the labels, and the pad id among real tokens too (it must still get no
// gradient through the lookups when padding_idx is set).
Batch make_batch(std::int64_t vocab) {
  torch::manual_seed(11);
  Batch b;
  b.ids = torch::randint(2, vocab, {3, 14}, torch::kLong);
  b.mask = torch::ones_like(b.ids);
  b.ids.narrow(1, 10, 4)[1].fill_(0);
  b.mask.narrow(1, 10, 4)[1].zero_();
  b.ids[2][3] = 0;
  b.labels = torch::randint(2, vocab, {3, 9}, torch::kLong);
  b.labels.narrow(1, 6, 3)[0].fill_(-100);
  b.labels[1][2] = 0;
  return b;
}

std::map<std::string, torch::Tensor> gradients(model::Seq2SeqLM& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : m->named_parameters()) {
    if (item.value().grad().defined()) out[item.key()] = item.value().grad().clone();
  }
  return out;
}

// Two micro-batches accumulated, through the plain or the fast paths.
std::map<std::string, torch::Tensor> step_gradients(std::int64_t padding_idx, bool fast, double smoothing) {
  const auto config = small_config(padding_idx);
  model::Seq2SeqLM m(config);
  model::init_weights(*m, 5);
  m->train();
  model::KernelChoices kernels;
  kernels.in_place_embedding_gradient = fast;
  m->set_kernel_choices(kernels);
  const auto batch = make_batch(config.vocab_size);
  for (int micro = 0; micro < 2; ++micro) {
    auto hidden = m->decode(m->shift_tokens_right(batch.labels), m->encode(batch.ids, batch.mask), batch.mask);
    const auto loss = fast ? m->token_loss(hidden, batch.labels, smoothing)
                           : kernels::label_loss_sum(m->lm_logits(hidden), batch.labels, smoothing);
    (loss.sum * 0.25).backward();
  }
  return gradients(m);
}

TEST(TiedEmbedding, InPlaceGradientsEqualAutograd) {
  for (const std::int64_t padding_idx : {std::int64_t{-1}, std::int64_t{0}}) {
    for (const double smoothing : {0.0, 0.1}) {
      const auto plain = step_gradients(padding_idx, false, smoothing);
      const auto fast = step_gradients(padding_idx, true, smoothing);
      ASSERT_EQ(plain.size(), fast.size());
      for (const auto& [name, g] : plain) {
        // k_proj biases have a true gradient of zero: both paths compute rounding noise there.
        if (name.find("k_proj.bias") != std::string::npos) continue;
        EXPECT_CLOSE(fast.at(name), g, relative(1e-5))
            << name + " padding_idx " + std::to_string(padding_idx) + " smoothing " + std::to_string(smoothing);
      }
    }
  }
}

TEST(TiedEmbedding, PaddingRowGetsNoLookupGradient) {
  auto weight = torch::randn({7, 3}, torch::requires_grad());
  auto ids = torch::tensor({0, 2, 0, 2, 5}, torch::kLong);
  auto out = kernels::embedding_lookup(weight, ids, /*padding_idx=*/0);
  EXPECT_TRUE(torch::equal(out.detach(), weight.detach().index_select(0, ids)));
  out.sum().backward();
  auto expected = torch::zeros({7, 3});
  expected[2].fill_(2.0);
  expected[5].fill_(1.0);
  EXPECT_TRUE(torch::equal(weight.grad(), expected)) << weight.grad();
  // A second use adds into the same buffer.
  kernels::embedding_lookup(weight, ids, -1).sum().backward();
  expected[0].fill_(2.0);
  expected[2].fill_(4.0);
  expected[5].fill_(2.0);
  EXPECT_TRUE(torch::equal(weight.grad(), expected)) << weight.grad();
}

TEST(TiedEmbedding, FallsBackWhenTheTableIsNotATrainableLeaf) {
  auto leaf = torch::randn({7, 3}, torch::requires_grad());
  auto scaled = leaf * 2.0;  // not a leaf: its gradient must flow through autograd
  auto ids = torch::tensor({1, 4, 4}, torch::kLong);
  kernels::embedding_lookup(scaled, ids, -1).sum().backward();
  auto expected = torch::zeros({7, 3});
  expected[1].fill_(2.0);
  expected[4].fill_(4.0);
  EXPECT_CLOSE(leaf.grad(), expected, relative(1e-6));
  torch::NoGradGuard no_grad;
  EXPECT_FALSE(kernels::embedding_lookup(leaf, ids, 0).requires_grad());
}

// linear_cross_entropy against full logits + label_loss_sum, value and gradients, for one set of options.
void check_fused_loss(const kernels::LinearCrossEntropyOptions& options, bool weight_is_leaf, const std::string& what) {
  torch::manual_seed(3);
  const std::int64_t vocab = 613, dim = 16;
  auto hidden_a = torch::randn({3, 5, dim}, torch::requires_grad());
  auto hidden_b = hidden_a.detach().clone().requires_grad_(true);
  auto weight_a = torch::randn({vocab, dim}, torch::requires_grad());
  auto weight_b = weight_a.detach().clone().requires_grad_(true);
  auto bias = torch::randn({1, vocab});
  auto labels = torch::randint(0, vocab, {3, 5}, torch::kLong);
  labels[0][4] = -100;
  labels[2][0] = -100;
  labels[1][1] = vocab - 1;

  auto plain = kernels::label_loss_sum(torch::linear(hidden_a, weight_a) + bias, labels, options.label_smoothing);
  plain.sum.backward();
  // A non-leaf head weight must get its gradient through autograd instead of in place.
  auto head = weight_is_leaf ? weight_b : weight_b * 1.0;
  auto fused = kernels::linear_cross_entropy(hidden_b, head, bias, labels, options);
  EXPECT_EQ(fused.tokens, plain.tokens) << what;
  EXPECT_CLOSE(fused.sum.item<double>(), plain.sum.item<double>(), relative(1e-5)) << what;
  (fused.sum * 1.0).backward();
  EXPECT_CLOSE(hidden_b.grad(), hidden_a.grad(), relative(1e-5)) << what + ": hidden gradient";
  EXPECT_CLOSE(weight_b.grad(), weight_a.grad(), relative(1e-5)) << what + ": weight gradient";
  // Positions labelled -100 get exactly nothing.
  EXPECT_EQ(hidden_b.grad()[0][4].abs().max().item<float>(), 0.0f) << what;
}

TEST(FusedLoss, EqualsFullLogitsCrossEntropy) {
  for (const double smoothing : {0.0, 0.1}) {
    kernels::LinearCrossEntropyOptions in_forward;  // the default: the gradient formed in forward
    in_forward.label_smoothing = smoothing;
    kernels::LinearCrossEntropyOptions chunked = in_forward;
    chunked.keep_logits_bytes = 0;
    chunked.chunk_bytes = 13 * 256 * 4;  // 256-column chunks: three of them, the last one short
    for (const bool leaf : {true, false}) {
      const auto tag = " smoothing " + std::to_string(smoothing) + (leaf ? " (in place)" : " (through autograd)");
      check_fused_loss(in_forward, leaf, "gradient in forward" + tag);
      check_fused_loss(chunked, leaf, "chunked" + tag);
    }
  }
}

TEST(FusedLoss, WithoutGradientsAndWithoutLabelTokens) {
  torch::manual_seed(4);
  auto hidden = torch::randn({2, 3, 8});
  auto weight = torch::randn({300, 8});
  auto labels = torch::randint(0, 300, {2, 3}, torch::kLong);
  {
    torch::NoGradGuard no_grad;
    const auto plain = kernels::label_loss_sum(torch::linear(hidden, weight), labels, 0.1);
    const auto fused = kernels::linear_cross_entropy(hidden, weight, {}, labels, {0.1});
    EXPECT_CLOSE(fused.sum.item<double>(), plain.sum.item<double>(), relative(1e-5));
    // A bias of zeros (skipped) is no bias.
    const auto zero_bias = kernels::linear_cross_entropy(hidden, weight, torch::zeros({1, 300}), labels, {0.1});
    EXPECT_EQ(zero_bias.sum.item<double>(), fused.sum.item<double>());
  }
  auto trainable = hidden.clone().requires_grad_(true);
  const auto none = kernels::linear_cross_entropy(trainable, weight, {}, torch::full({2, 3}, -100, torch::kLong));
  EXPECT_EQ(none.tokens, 0);
  EXPECT_EQ(none.sum.item<double>(), 0.0);
  none.sum.backward();
  EXPECT_EQ(trainable.grad().abs().max().item<double>(), 0.0);
  labels[1][2] = 300;
  EXPECT_THROW(kernels::linear_cross_entropy(hidden, weight, {}, labels), c10::Error);
}

// ---- optimizers ----

// How each step is taken: step() alone; clip_grad_norm, step(), zero_gradients; or optimizer_step, which hands the
// clipping factor and the zeroing to the update (GradientTreatment).
enum class StepWay { step, clip_step_zero, optimizer_step };

// Matrices, a vector and a tall matrix like an embedding, with fresh random gradients per step. With a StepWay
// other than step, the gradients after the last step are returned too.
std::vector<torch::Tensor> run_optimizer(bool fused, const std::string& kind, int steps, StepWay way = StepWay::step,
                                         double max_norm = 1.0) {
  torch::manual_seed(21);
  // The last one is large enough for the kernels to split it between threads.
  std::vector<torch::Tensor> params = {torch::randn({37, 53}) * 0.1, torch::randn({53}) * 0.1,
                                       torch::randn({611, 24}) * 0.1, torch::randn({2100, 2048}) * 0.1};
  for (auto& p : params) p.requires_grad_(true);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(params);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (kind == "adamw") {
    optim::AdamWOptions o(1e-3);
    o.weight_decay(0.01).fused(fused);
    opt = std::make_unique<optim::AdamW>(std::move(groups), o);
  } else {
    optim::AdafactorOptions o(1e-3);
    o.weight_decay(0.01).fused(fused);
    opt = std::make_unique<optim::Adafactor>(std::move(groups), o);
  }
  auto generator = at::make_generator<at::CPUGeneratorImpl>(99);
  for (int step = 0; step < steps; ++step) {
    for (auto& p : params) {
      const auto g = torch::randn(p.sizes(), generator) * (step == 1 ? 30.0 : 0.5);
      if (way == StepWay::step) {
        p.mutable_grad() = g;
      } else {
        // The gradients stay allocated between steps, as the Trainer keeps them: zeroed, then accumulated into.
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        p.mutable_grad().add_(g);
      }
    }
    if (way == StepWay::step) {
      opt->step();
    } else if (way == StepWay::clip_step_zero) {
      optim::clip_grad_norm(params, max_norm);
      opt->step();
      for (auto& p : params) p.mutable_grad().zero_();
    } else {
      optim::UpdateOptions update;
      update.max_grad_norm = max_norm;
      optim::optimizer_step(*opt, params, update);
    }
  }
  std::vector<torch::Tensor> out;
  for (auto& p : params) out.push_back(p.detach().clone());
  if (way != StepWay::step) {
    for (auto& p : params) out.push_back(p.grad().clone());
  }
  const auto state =
      optim::export_optimizer_state(*opt, {{"a", params[0]}, {"b", params[1]}, {"c", params[2]}, {"d", params[3]}});
  for (const auto& [name, t] : state) out.push_back(t.to(torch::kDouble));
  return out;
}

TEST(FusedOptimizers, EqualTheTensorFormulas) {
  for (const std::string kind : {"adamw", "adafactor"}) {
    const auto reference = run_optimizer(false, kind, 4);
    const auto fused = run_optimizer(true, kind, 4);
    ASSERT_EQ(reference.size(), fused.size());
    for (std::size_t i = 0; i < reference.size(); ++i) {
      EXPECT_CLOSE(fused[i], reference[i], relative(2e-6)) << kind + " tensor " + std::to_string(i);
    }
  }
}

// Clipping's factor applied as the gradient is read and zeroing behind the read, inside the fused passes (or
// around the tensor ops), give what clip_grad_norm, step() and zeroing give one after the other, bit for bit:
// with the clip active (the gradients of step 1 are 60 times larger) and with a bound no gradient reaches.
TEST(FusedOptimizers, ClippingAndZeroingInsideTheUpdateEqualThemAround) {
  for (const std::string kind : {"adamw", "adafactor"}) {
    for (const bool fused : {true, false}) {
      for (const double max_norm : {1.0, 1e9}) {
        const auto around = run_optimizer(fused, kind, 3, StepWay::clip_step_zero, max_norm);
        const auto inside = run_optimizer(fused, kind, 3, StepWay::optimizer_step, max_norm);
        ASSERT_EQ(around.size(), inside.size());
        const std::string what = kind + (fused ? " fused" : " tensor ops") + " max_norm " + std::to_string(max_norm);
        for (std::size_t i = 0; i < around.size(); ++i) {
          EXPECT_TRUE(torch::equal(inside[i], around[i])) << what << ": tensor " << i;
        }
        for (std::size_t i = 4; i < 8; ++i) {  // the gradients, left zeroed
          EXPECT_EQ(inside[i].abs().max().item<float>(), 0.0f) << what << ": gradient " << i - 4;
        }
      }
    }
  }
  // And the clip was active: the parameters differ from those of an unclipped run.
  const auto clipped = run_optimizer(true, "adamw", 3, StepWay::optimizer_step, 1.0);
  const auto unclipped = run_optimizer(true, "adamw", 3, StepWay::optimizer_step, 1e9);
  EXPECT_FALSE(torch::equal(clipped[0], unclipped[0]));
}

TEST(FusedOptimizers, ResultsDoNotDependOnTheThreadCount) {
  const int before = at::get_num_threads();
  for (const std::string kind : {"adamw", "adafactor"}) {
    at::set_num_threads(1);
    const auto one = run_optimizer(true, kind, 3);
    at::set_num_threads(2);
    const auto two = run_optimizer(true, kind, 3);
    for (std::size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(torch::equal(one[i], two[i])) << kind << " " << i;
  }
  at::set_num_threads(before);
}

// ---- dropout ----

TEST(Dropout, KeepsOneMinusPAndScalesWhatItKeeps) {
  torch::manual_seed(8);
  auto x = torch::rand({1000, 1000}) + 0.5;  // no zeros of its own
  auto y = kernels::dropout(x, 0.1, true);
  const auto kept = y.ne(0);
  EXPECT_NEAR(kept.to(torch::kDouble).mean().item<double>(), 0.9, 0.002);
  EXPECT_CLOSE(y.masked_select(kept), x.masked_select(kept) / 0.9, relative(1e-6)) << "kept values";
  // The same seed gives the same mask; the generator moved on, so the next call gives another.
  torch::manual_seed(8);
  torch::rand({1000, 1000});
  EXPECT_TRUE(torch::equal(kernels::dropout(x, 0.1, true), y));
  EXPECT_FALSE(torch::equal(kernels::dropout(x, 0.1, true), y));
  // Off when not training or p = 0.
  EXPECT_TRUE(kernels::dropout(x, 0.1, false).is_same(x));
  EXPECT_TRUE(kernels::dropout(x, 0.0, true).is_same(x));
}

TEST(Dropout, BackwardUsesTheSameMask) {
  torch::manual_seed(9);
  auto x = (torch::rand({64, 33}) + 0.5).requires_grad_(true);
  auto y = kernels::dropout(x, 0.25, true);
  auto weights = torch::randn({64, 33});
  (y * weights).sum().backward();
  const auto expected = y.detach().ne(0).to(torch::kFloat) * weights / 0.75;
  EXPECT_CLOSE(x.grad(), expected, relative(1e-6)) << "gradient";
  // bfloat16 takes the same kernel.
  auto xb = x.detach().to(torch::kBFloat16);
  torch::manual_seed(9);
  torch::rand({64, 33});
  auto yb = kernels::dropout(xb, 0.25, true);
  EXPECT_TRUE(torch::equal(yb.ne(0), y.detach().ne(0)));
}

// fc2(dropout(activation(u))) as one node that recomputes fc2's input in backward, against LibTorch's composition:
// output and every gradient the same bit for bit, for each activation, with and without dropout and fc2's bias, for
// a (B, T, ffn) input.
struct FeedForwardResult {
  torch::Tensor output, grad_u, grad_weight, grad_bias;
};

FeedForwardResult run_feed_forward(model::Activation activation, double p, bool with_bias, bool recompute) {
  torch::manual_seed(21);
  const auto u = torch::randn({3, 7, 40}).requires_grad_(true);
  const auto weight = (torch::randn({24, 40}) * 0.2).requires_grad_(true);
  const auto bias = with_bias ? torch::randn({24}).requires_grad_(true) : torch::Tensor();
  const auto upstream = torch::randn({3, 7, 24});
  torch::manual_seed(22);  // the dropout's draw
  // Plain: what the layer computes without the node, fc2 through kernels::linear in training (its products are the
  // node's: oneDNN's where available, else LibTorch's).
  const auto y = recompute
                     ? kernels::activation_dropout_linear(u, activation, p, true, true, weight, bias, true)
                     : kernels::linear(kernels::dropout(kernels::activate(u, activation), p, true), weight, bias, true);
  (y * upstream).sum().backward();
  return {y.detach(), u.grad(), weight.grad(), with_bias ? bias.grad() : torch::Tensor()};
}

TEST(RecomputedFeedForward, EqualsTheCompositionBitForBit) {
  using model::Activation;
  for (const auto activation : {Activation::gelu, Activation::relu, Activation::gelu_new, Activation::silu}) {
    for (const double p : {0.0, 0.3}) {
      for (const bool with_bias : {true, false}) {
        SCOPED_TRACE("activation " + std::to_string(static_cast<int>(activation)) + ", p " + std::to_string(p) +
                     (with_bias ? ", bias" : ", no bias"));
        const auto plain = run_feed_forward(activation, p, with_bias, false);
        const auto fused = run_feed_forward(activation, p, with_bias, true);
        EXPECT_TRUE(torch::equal(fused.output, plain.output)) << "output";
        EXPECT_TRUE(torch::equal(fused.grad_u, plain.grad_u)) << "gradient of u";
        EXPECT_TRUE(torch::equal(fused.grad_weight, plain.grad_weight)) << "gradient of the weight";
        if (with_bias) EXPECT_TRUE(torch::equal(fused.grad_bias, plain.grad_bias)) << "gradient of the bias";
        if (p > 0.0) EXPECT_GT(fused.output.ne(plain.output * 0).sum().item<std::int64_t>(), 0);
      }
    }
  }
}

// The node keeps u and the byte mask, not fc2's input: autograd's saved tensors hold one float (B, T, ffn) less.
TEST(RecomputedFeedForward, KeepsOneFloatTensorLessUntilBackward) {
  auto& allocator = memory::TrackingCpuAllocator::instance();
  auto kept_bytes = [&allocator](bool recompute) {
    torch::manual_seed(23);
    const auto u = torch::randn({4, 64, 512}).requires_grad_(true);
    const auto weight = torch::randn({32, 512}).requires_grad_(true);
    const auto bias = torch::randn({32}).requires_grad_(true);
    const auto before = allocator.current_bytes();
    auto y = kernels::activation_dropout_linear(u, model::Activation::gelu, 0.1, true, true, weight, bias, recompute);
    return allocator.current_bytes() - before - static_cast<std::int64_t>(y.numel() * 4);
  };
  const auto plain = kept_bytes(false);
  const auto fused = kept_bytes(true);
  EXPECT_EQ(plain - fused, 4 * 64 * 512 * 4) << "plain " << plain << " bytes, fused " << fused;
}

// The node's forward writes the dropout over the activation's output and its backward holds one tensor of u's size
// beside u at a time (fc2's recomputed input until the weight's gradient, then u's gradient, masked and taken
// through the activation in place): above what exists before each pass, each peak is under 1.5 u (the activation's
// output, recomputed, and a quarter of u's bytes for the byte mask in forward; before, the backward held the
// recomputed activation, its masked copy, the input's gradient and its masked copy, 4 u, and the forward 2.25 u).
TEST(RecomputedFeedForward, EachPassHoldsOneTensorOfUsSizeAtATime) {
  auto& allocator = memory::TrackingCpuAllocator::instance();
  const std::int64_t u_bytes = 4 * 64 * 512 * 4;
  const auto peaks = [&allocator]() {
    torch::manual_seed(23);
    auto u = torch::randn({4, 64, 512}).requires_grad_(true);
    const auto weight = torch::randn({32, 512}).requires_grad_(true);
    const auto bias = torch::randn({32}).requires_grad_(true);
    const auto upstream = torch::randn({4, 64, 32});
    allocator.reset_peak();
    auto before = allocator.current_bytes();
    auto y = kernels::activation_dropout_linear(u, model::Activation::gelu, 0.1, true, true, weight, bias, true);
    const auto forward = allocator.peak_bytes() - before;
    allocator.reset_peak();
    before = allocator.current_bytes();
    y.backward(upstream);
    return std::make_pair(forward, allocator.peak_bytes() - before);
  };
  const auto [forward, backward] = peaks();
  EXPECT_LT(forward, u_bytes * 3 / 2) << forward;
  EXPECT_LT(backward, u_bytes * 3 / 2) << backward;
}

// Without gradients the dropout is written over its input, with the same draw and bits as kernels::dropout.
TEST(RecomputedFeedForward, DropoutOverItsInputIsTheSameDraw) {
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({5, 7, 33});
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const auto input = x.to(dtype);
    torch::manual_seed(5);
    const auto plain = kernels::dropout(input, 0.3, true, true);
    torch::manual_seed(5);
    auto copy = input.clone();
    const auto* data = copy.data_ptr();
    const auto over = kernels::dropout_over(std::move(copy), 0.3, true, true);
    EXPECT_TRUE(torch::equal(over, plain));
    EXPECT_EQ(over.data_ptr(), data);  // written over the input
    EXPECT_GT(over.eq(0).sum().item<std::int64_t>(), 0);
  }
}

}  // namespace
}  // namespace fitsum::test
