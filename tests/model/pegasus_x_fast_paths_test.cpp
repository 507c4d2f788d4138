// The fast paths of PEGASUS-X's encoder layers (model/pegasus_x_layers.h): the stack's KernelChoices reach them; the
// recomputed feed-forward (kernels/feed_forward.h) and the attention's node (kernels/attention_dropout.h: probabilities
// and dropout recomputed) give the plain composition's outputs and gradients bit for bit while keeping less until
// backward. The products against transformers themselves: tests/model/pegasus_x_attention_test.cpp's fixtures and
// tests/hf.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "fitsum/io/hf_config.h"
#include "fitsum/kernels/attention_dropout.h"
#include "fitsum/kernels/onednn_linear.h"
#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/model/long_t5_layers.h"
#include "fitsum/model/pegasus_x_layers.h"
#include "fitsum/model/seq2seq.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

model::PegasusXLayerOptions layer_options() {
  model::PegasusXLayerOptions o;
  o.d_model = 32;
  o.heads = 4;
  o.ffn_dim = 64;
  o.block_size = 4;
  o.stagger_blocks = true;
  o.activation = model::Activation::relu;
  o.dropout = 0.1;
  o.attention_dropout = 0.2;
  o.activation_dropout = 0.3;
  return o;
}

struct LayerRun {
  torch::Tensor hidden, global, grad_hidden, grad_global;
  std::vector<torch::Tensor> parameter_grads;
};

// One training forward and backward of `layer` on seeded inputs (2 rows of 12 positions, 2 global tokens).
LayerRun run_layer(model::PegasusXEncoderLayer& layer) {
  torch::manual_seed(7);
  const auto hidden = torch::randn({2, 12, 32}).requires_grad_(true);
  const auto global = torch::randn({2, 2, 32}).requires_grad_(true);
  auto mask = torch::zeros({2, 12});
  mask.index_put_({1, torch::indexing::Slice(9, 12)}, model::padding_mask_value(torch::kFloat));
  layer->zero_grad();
  const auto out = layer->forward(hidden, global, mask);
  ((out.hidden * torch::randn_like(out.hidden)).sum() + (out.global * torch::randn_like(out.global)).sum()).backward();
  LayerRun run{out.hidden.detach(), out.global.detach(), hidden.grad(), global.grad(), {}};
  for (const auto& p : layer->parameters()) run.parameter_grads.push_back(p.grad().clone());
  return run;
}

void expect_equal_runs(const LayerRun& fast, const LayerRun& plain) {
  EXPECT_TRUE(torch::equal(fast.hidden, plain.hidden));
  EXPECT_TRUE(torch::equal(fast.global, plain.global));
  EXPECT_TRUE(torch::equal(fast.grad_hidden, plain.grad_hidden));
  EXPECT_TRUE(torch::equal(fast.grad_global, plain.grad_global));
  ASSERT_EQ(fast.parameter_grads.size(), plain.parameter_grads.size());
  for (std::size_t i = 0; i < fast.parameter_grads.size(); ++i) {
    EXPECT_TRUE(torch::equal(fast.parameter_grads[i], plain.parameter_grads[i])) << "parameter " << i;
  }
}

TEST(PegasusXFastPaths, RecomputedFeedForwardEqualsThePlainLayerBitForBit) {
  model::PegasusXEncoderLayer layer(layer_options());
  layer->train();
  layer->set_kernel_choices(/*byte_mask_dropout=*/true, /*recomputed_feed_forward=*/false,
                            /*recomputed_attention_dropout=*/false);
  const auto plain = run_layer(layer);
  layer->set_kernel_choices(true, true, false);
  expect_equal_runs(run_layer(layer), plain);
}

// Both attentions (the global tokens' over every position, the positions' over global tokens and block) with and
// without the recomputing node: the same masks (one draw each, in the same order) and the same products.
TEST(PegasusXFastPaths, RecomputedAttentionDropoutEqualsThePlainLayerBitForBit) {
  for (const bool stagger : {false, true}) {
    auto options = layer_options();
    options.stagger_blocks = stagger;
    model::PegasusXEncoderLayer layer(options);
    layer->train();
    layer->set_kernel_choices(true, true, false);
    const auto plain = run_layer(layer);
    layer->set_kernel_choices(true, true, true);
    const auto fast = run_layer(layer);
    SCOPED_TRACE(stagger ? "staggered" : "not staggered");
    expect_equal_runs(fast, plain);
    // Dropout did act: without it the outputs differ.
    layer->set_kernel_choices(true, true, true);
    layer->eval();
    torch::manual_seed(7);
    const auto hidden = torch::randn({2, 12, 32});
    EXPECT_FALSE(
        torch::equal(layer->forward(hidden, torch::randn({2, 2, 32}), torch::zeros({2, 12})).hidden, plain.hidden));
  }
}

// Bytes the layer's training forward leaves allocated (its outputs and what autograd keeps for backward).
std::int64_t kept_bytes(model::PegasusXEncoderLayer& layer, bool recompute_feed_forward, bool recompute_attention) {
  auto& allocator = memory::TrackingCpuAllocator::instance();
  layer->set_kernel_choices(true, recompute_feed_forward, recompute_attention);
  torch::manual_seed(7);
  const auto hidden = torch::randn({2, 12, 32}).requires_grad_(true);
  const auto global = torch::randn({2, 2, 32}).requires_grad_(true);
  const auto mask = torch::zeros({2, 12});
  const auto before = allocator.current_bytes();
  const auto out = layer->forward(hidden, global, mask);
  return allocator.current_bytes() - before;
}

// Both feed-forwards (the tokens' and the global tokens') keep u and the byte mask, not fc2's float input; both
// attentions keep the byte mask and their operands, neither the softmax's output nor the dropped probabilities, but
// their additive masks (the composition's in-place sum does not keep them).
TEST(PegasusXFastPaths, TheRecomputingNodesKeepTheirLargestTensorsLess) {
  model::PegasusXEncoderLayer layer(layer_options());  // staggered: 12 positions + 2 x 2 padding, 4 blocks of 4
  layer->train();
  const auto plain = kept_bytes(layer, false, false);
  const auto feed_forward = kept_bytes(layer, true, false);
  const auto both = kept_bytes(layer, true, true);
  // (2 x 12 token rows + 2 x 2 global rows) x ffn 64 floats.
  EXPECT_EQ(plain - feed_forward, (2 * 12 + 2 * 2) * 64 * 4);
  // Probabilities: global 2 x 4 heads x 2 global rows x (2 + 16) keys, local 2 x 4 heads x 16 rows x (2 + 4) keys,
  // twice (softmax's output and the dropped copy); masks: 2 x (2 + 16) and 2 x 4 blocks x (2 + 4). The node runs on
  // oneDNN's products; without them (FITSUM_ONEDNN=0) the plain path runs and keeps what it keeps.
  const std::int64_t probabilities = 2 * 4 * 2 * 18 + 2 * 4 * 16 * 6, masks = 2 * 18 + 2 * 4 * 6;
  EXPECT_EQ(feed_forward - both, kernels::onednn_available() ? (2 * probabilities - masks) * 4 : 0);
}

// A checkpointed layer's first pass runs without gradients: the attentions then run head by head with the node's
// mask, which equals the composition's (one draw each, in the same order), so the pass stores what the recompute
// reproduces.
TEST(PegasusXFastPaths, WithoutGradientsTheAttentionsRunHeadByHeadAsTheComposition) {
  model::PegasusXEncoderLayer layer(layer_options());
  layer->train();
  torch::NoGradGuard no_grad;
  const auto forward = [&](bool recompute_attention) {
    layer->set_kernel_choices(true, true, recompute_attention);
    torch::manual_seed(7);
    const auto hidden = torch::randn({2, 12, 32});
    const auto global = torch::randn({2, 2, 32});
    auto mask = torch::zeros({2, 12});
    mask.index_put_({1, torch::indexing::Slice(9, 12)}, model::padding_mask_value(torch::kFloat));
    return layer->forward(hidden, global, mask);
  };
  const auto plain = forward(false), by_heads = forward(true);
  EXPECT_TRUE(torch::equal(by_heads.hidden, plain.hidden));
  EXPECT_TRUE(torch::equal(by_heads.global, plain.global));
}

// The node's forward and backward hold one head's probabilities at a time, not every head's: with 8 heads of 256 x
// 256 probabilities (256 KiB a head, 2 MiB in all), the composition's backward holds several times 2 MiB above its
// inputs, the node's less than 2 MiB: its byte mask (512 KiB), the output and the operands' gradients (512 KiB) and
// two of one head's probability-sized tensors at a time.
TEST(PegasusXFastPaths, TheAttentionNodeHoldsOneHeadsProbabilitiesAtATime) {
  if (!kernels::onednn_available()) GTEST_SKIP() << "the node runs on oneDNN's products";
  auto& allocator = memory::TrackingCpuAllocator::instance();
  const auto peak_above_inputs = [&](bool recompute) {
    torch::manual_seed(3);
    const auto q = torch::randn({1, 8, 256, 16}).requires_grad_(true);
    const auto k_t = torch::randn({1, 8, 16, 256}).requires_grad_(true);
    const auto v = torch::randn({1, 8, 256, 16}).requires_grad_(true);
    const auto mask = torch::zeros({1, 1, 1, 256});
    const auto grad = torch::randn({1, 8, 256, 16});
    allocator.reset_peak();
    const auto before = allocator.current_bytes();
    kernels::attention_context(q, k_t, mask, v, 0.1, /*training=*/true, /*byte_mask=*/true, recompute).backward(grad);
    return allocator.peak_bytes() - before;
  };
  const std::int64_t head = 256 * 256 * 4, all_heads = 8 * head;
  const auto composition = peak_above_inputs(false), node = peak_above_inputs(true);
  EXPECT_GE(composition, 3 * all_heads) << composition;
  EXPECT_LT(node, all_heads) << node;
}

TEST(PegasusXFastPaths, TheModelsKernelChoicesReachTheEncoderLayers) {
  const auto config = io::model_config_from_hf(nlohmann::json{{"model_type", "pegasus_x"},
                                                              {"d_model", 32},
                                                              {"encoder_layers", 2},
                                                              {"decoder_layers", 1},
                                                              {"encoder_attention_heads", 4},
                                                              {"decoder_attention_heads", 4},
                                                              {"encoder_ffn_dim", 64},
                                                              {"decoder_ffn_dim", 64},
                                                              {"vocab_size", 120},
                                                              {"block_size", 4},
                                                              {"num_global_tokens", 2}},
                                               "test config");
  model::Seq2SeqLM lm(config);
  for (const bool on : {false, true}) {
    model::KernelChoices kernels;
    kernels.byte_mask_dropout = on;
    kernels.recomputed_feed_forward = on;
    kernels.recomputed_attention_dropout = on;
    lm->set_kernel_choices(kernels);
    std::size_t seen = 0;
    for (const auto& module : lm->modules(/*include_self=*/false)) {
      if (const auto* layer = module->as<model::PegasusXEncoderLayerImpl>()) {
        EXPECT_EQ(layer->options().byte_mask_dropout, on);
        EXPECT_EQ(layer->options().recomputed_feed_forward, on);
        EXPECT_EQ(layer->options().recomputed_attention_dropout, on);
        ++seen;
      }
    }
    EXPECT_EQ(seen, 2u);
  }
}

// LongT5's encoder blocks take the model's choices too: fitsum's dropout and the fused RMSNorms.
TEST(LongT5FastPaths, TheModelsKernelChoicesReachTheEncoderBlocks) {
  const auto config = io::model_config_from_hf(nlohmann::json{{"model_type", "longt5"},
                                                              {"d_model", 32},
                                                              {"d_kv", 8},
                                                              {"d_ff", 48},
                                                              {"num_layers", 2},
                                                              {"num_decoder_layers", 1},
                                                              {"num_heads", 4},
                                                              {"vocab_size", 120},
                                                              {"local_radius", 3},
                                                              {"encoder_attention_type", "transient-global"},
                                                              {"feed_forward_proj", "gated-gelu"}},
                                               "test config");
  model::Seq2SeqLM lm(config);
  for (const bool on : {false, true}) {
    model::KernelChoices kernels;
    kernels.byte_mask_dropout = on;
    kernels.fused_rms_norm = on;
    lm->set_kernel_choices(kernels);
    std::size_t seen = 0;
    for (const auto& module : lm->modules(/*include_self=*/false)) {
      if (const auto* block = module->as<model::LongT5EncoderBlockImpl>()) {
        EXPECT_EQ(block->options().byte_mask_dropout, on);
        EXPECT_EQ(block->global_attention->options().byte_mask_dropout, on);
        EXPECT_EQ(block->attention_norm->fused, on);
        EXPECT_EQ(block->global_attention->global_input_layer_norm->fused, on);
        ++seen;
      }
    }
    EXPECT_EQ(seen, 2u);
  }
}

}  // namespace
}  // namespace fitsum::test
