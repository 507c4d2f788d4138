// LongT5's encoder pieces (model/long_t5_layers.h) against transformers' modeling_longt5.py itself:
// tests/data/fixtures/long-t5-layer/reference.safetensors, written by tests/data/make_long_t5_fixtures.py with
// transformers 4.47.1 on torch 1.13 (seeded random encoders of d_model 32, d_kv 8, 4 heads, d_ff 64, gated-gelu,
// 2 layers, local_radius 3, global_block_size 4, 8 buckets up to distance 16, one with local and one with
// transient-global attention; a batch of 2 rows of length 11, one with 5 padding positions). HF's weights are loaded
// by name into fitsum's modules; outputs, the shared position bias and the gradients of the input and of every
// parameter are compared in float32 within 1e-5 of the reference's largest magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fitsum/io/safetensors.h"
#include "fitsum/kernels/dropout.h"
#include "fitsum/model/long_t5_layers.h"
#include "layer_reference.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

constexpr double kBound = 1e-5;

const LayerReference& reference() {
  static const LayerReference fixture(source_dir() / "tests" / "data" / "fixtures" / "long-t5-layer" / "reference.safetensors",
                                      "long-t5", kBound);
  return fixture;
}

torch::Tensor hf(const std::string& name) { return reference().hf(name); }
torch::Tensor hf_ids(const std::string& name) { return reference().ids(name); }
void load_by_name(torch::nn::Module& module, const std::string& prefix) { reference().load_by_name(module, prefix); }

model::LongT5LayerOptions tiny_options(model::LongT5AttentionType type, bool first) {
  model::LongT5LayerOptions o;
  o.d_model = 32;
  o.d_kv = 8;
  o.heads = 4;
  o.d_ff = 64;
  o.gated_ffn = true;
  o.local_radius = 3;
  o.global_block_size = 4;
  o.num_buckets = 8;
  o.max_distance = 16;
  o.attention_type = type;
  o.has_relative_attention_bias = first;
  return o;
}

// The pieces composed as LongT5Stack (the encoder) composes them: inputs_embeds in, last_hidden_state out. Module
// names are HF's encoder keys (block.N...., final_layer_norm).
struct TinyEncoder : torch::nn::Module {
  explicit TinyEncoder(model::LongT5AttentionType type, double dropout = 0.0) : dropout(dropout) {
    block = register_module("block", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < 2; ++i) {
      auto options = tiny_options(type, i == 0);
      options.dropout = dropout;
      options.byte_mask_dropout = false;  // torch::dropout: HF's masks for a seed
      block->push_back(model::LongT5EncoderBlock(options));
    }
    final_layer_norm = register_module("final_layer_norm", model::RMSNorm(32, 1e-6));
  }
  torch::Tensor forward(const torch::Tensor& embeds, const torch::Tensor& attention_mask) {
    // LongT5Stack: dropout on the embeddings, the blocks, final_layer_norm, dropout.
    const auto hidden = kernels::dropout(embeds, dropout, is_training(), /*byte_mask=*/false);
    const auto out = final_layer_norm->forward(model::run_long_t5_blocks(block, hidden, attention_mask));
    return kernels::dropout(out, dropout, is_training(), /*byte_mask=*/false);
  }
  double dropout;
  torch::nn::ModuleList block{nullptr};
  model::RMSNorm final_layer_norm{nullptr};
};

std::string prefix_of(model::LongT5AttentionType type) {
  return type == model::LongT5AttentionType::local ? "local." : "tglobal.";
}

TEST(LongT5Layers, ParameterNamesAreTransformersKeysInTheirOrder) {
  std::vector<std::string> names;
  for (const auto& p : model::LongT5EncoderBlock(tiny_options(model::LongT5AttentionType::transient_global, true))
                           ->named_parameters()) {
    names.push_back(p.key());
  }
  const std::string a = "layer.0.TransientGlobalSelfAttention.";
  const std::vector<std::string> hf_names = {a + "q.weight",
                                             a + "k.weight",
                                             a + "v.weight",
                                             a + "o.weight",
                                             a + "relative_attention_bias.weight",
                                             a + "global_relative_attention_bias.weight",
                                             a + "global_input_layer_norm.weight",
                                             "layer.0.layer_norm.weight",
                                             "layer.1.DenseReluDense.wi_0.weight",
                                             "layer.1.DenseReluDense.wi_1.weight",
                                             "layer.1.DenseReluDense.wo.weight",
                                             "layer.1.layer_norm.weight"};
  EXPECT_EQ(names, hf_names);  // LongT5Block.state_dict()'s order
  for (const auto type : {model::LongT5AttentionType::local, model::LongT5AttentionType::transient_global}) {
    TinyEncoder encoder(type);
    load_by_name(encoder, prefix_of(type));  // both blocks, the first with the bias tables, the second without
  }
}

// _make_global_fixed_block_ids (global blocks of 3 and 4: orphans, padding, a row shorter than one block) and
// _get_local_attention_mask (blocks of 4) for the fixture's masks.
TEST(LongT5Layers, BlockIdsAndLocalMaskAreTransformers) {
  for (const std::string name : {"full11", "short3", "ragged13"}) {
    const auto mask = hf_ids("ids." + name + ".mask");
    for (const std::int64_t block : {3, 4}) {
      const auto ids = model::global_fixed_block_ids(mask, block);
      const auto key = "ids." + name + ".g" + std::to_string(block);
      EXPECT_TRUE(torch::equal(ids.block_ids, hf_ids(key + ".block_ids"))) << key << "\n" << ids.block_ids;
      EXPECT_TRUE(torch::equal(ids.segment_ids, hf_ids(key + ".segment_ids"))) << key << "\n" << ids.segment_ids;
    }
    EXPECT_TRUE(
        torch::equal(model::long_t5_local_mask(mask, 4).to(torch::kLong), hf_ids("ids." + name + ".local_mask")))
        << name;
  }
}

class LongT5EncoderParity : public ::testing::TestWithParam<model::LongT5AttentionType> {};

TEST_P(LongT5EncoderParity, OutputsPositionBiasAndEveryGradientMatchTransformers) {
  const auto type = GetParam();
  const auto prefix = prefix_of(type);
  TinyEncoder encoder(type);
  load_by_name(encoder, prefix);
  encoder.eval();
  const auto embeds = hf("input.embeds").requires_grad_(true);  // (2, 11, 32)
  const auto mask = hf_ids("input.attention_mask");             // (2, 11), row 1 padded after 6
  // What the first block hands the second: the shared bias with the masks folded in.
  {
    torch::NoGradGuard no_grad;
    auto& first = *encoder.block[0]->as<model::LongT5EncoderBlock>();
    const auto got = first.forward(embeds.detach(), mask).position_bias;
    const auto want = hf(prefix + "position_bias");
    ASSERT_EQ(got.sizes(), want.sizes());
    // The -1e10 of masked keys would dwarf the bias in a relative bound: the masked entries must be the same ones,
    // and the others within the bound of their own largest magnitude.
    const auto masked = want < -1e9;
    EXPECT_TRUE(torch::equal(got < -1e9, masked)) << "masked keys differ";
    const auto allowed = masked.logical_not();
    EXPECT_CLOSE(got.masked_select(allowed), want.masked_select(allowed), relative(kBound)) << "position bias";
    std::cout << "[ long-t5 ] " << prefix << "position bias: " << allowed.sum().item<std::int64_t>() << " of "
              << want.numel() << " entries allowed, worst relative difference "
              << worst_relative(got.masked_select(allowed), want.masked_select(allowed)) << "\n";
  }
  const auto out = encoder.forward(embeds, mask);
  (out * hf(prefix + "grad_out")).sum().backward();
  Comparison c{reference()};
  c.expect(out, prefix + "out");
  c.expect(embeds.grad(), prefix + "grad.input.embeds");
  std::size_t checked = 0;
  for (const auto& p : encoder.named_parameters()) {
    c.expect(p.value().grad(), prefix + "grad." + p.key());
    ++checked;
  }
  EXPECT_EQ(checked, type == model::LongT5AttentionType::local ? 20u : 23u);  // every parameter has a gradient
  c.report(prefix + "outputs and gradients");
}

// 3 positions, fewer than one block and than one global block: the window is one padded block and
// transient-global attention has no side keys (G = 0), as in transformers.
TEST_P(LongT5EncoderParity, InputShorterThanOneBlockMatchesTransformers) {
  const auto type = GetParam();
  const auto prefix = prefix_of(type);
  TinyEncoder encoder(type);
  load_by_name(encoder, prefix);
  encoder.eval();
  const auto embeds = hf("input.embeds").narrow(1, 0, 3).clone().requires_grad_(true);
  const auto out = encoder.forward(embeds, hf_ids(prefix + "short.mask"));
  (out * hf(prefix + "grad_out").narrow(1, 0, 3)).sum().backward();
  Comparison c{reference()};
  c.expect(out, prefix + "short.out");
  c.expect(embeds.grad(), prefix + "short.grad.input.embeds");
  c.report(prefix + "3 positions");
}

// Training mode with dropout_rate 0.1: with torch::dropout (the byte-mask kernel off) the same seed draws
// transformers' masks, so every dropout is at HF's place, in HF's order (the embeddings; per block the attention
// probabilities, the attention output, the feed-forward's activation and output; the final states), at its rate.
TEST_P(LongT5EncoderParity, DropoutIsAppliedWhereTransformersAppliesIt) {
  const auto type = GetParam();
  const auto prefix = prefix_of(type);
  TinyEncoder encoder(type, 0.1);
  load_by_name(encoder, prefix);
  encoder.train();
  const auto embeds = hf("input.embeds").requires_grad_(true);
  torch::manual_seed(4555);  // the fixture's dropout seed
  const auto out = encoder.forward(embeds, hf_ids("input.attention_mask"));
  (out * hf(prefix + "grad_out")).sum().backward();
  Comparison c{reference()};
  c.expect(out, prefix + "dropout.out");
  c.expect(embeds.grad(), prefix + "dropout.grad.input.embeds");
  c.report(prefix + "dropout");
  EXPECT_FALSE(torch::allclose(out, hf(prefix + "out"), 1e-3, 1e-3));  // dropout acted
}

INSTANTIATE_TEST_SUITE_P(AttentionType, LongT5EncoderParity,
                         ::testing::Values(model::LongT5AttentionType::local,
                                           model::LongT5AttentionType::transient_global),
                         [](const auto& info) {
                           return info.param == model::LongT5AttentionType::local ? "Local" : "TransientGlobal";
                         });

// The later blocks own no bias table: given no bias, a transient-global one has no side bias to build, and says so;
// a bias from the other attention type does not fit the scores.
TEST(LongT5Layers, LaterBlocksNeedTheFirstBlocksBias) {
  const auto hidden = torch::randn({1, 9, 32});
  const auto mask = torch::ones({1, 9}, torch::kLong);
  model::LongT5TransientGlobalAttention later(tiny_options(model::LongT5AttentionType::transient_global, false));
  EXPECT_THROW(later->forward(hidden, mask), c10::Error);
  model::LongT5LocalAttention local(tiny_options(model::LongT5AttentionType::local, true));
  const auto local_bias = local->forward(hidden, mask).position_bias;  // (1, 3, 4, 4, 12)
  EXPECT_EQ(local_bias.sizes(), (std::vector<std::int64_t>{1, 3, 4, 4, 12}));
  EXPECT_THROW(later->forward(hidden, mask, local_bias), c10::Error);  // 12 keys, not 12 + 2
}

TEST(LongT5Layers, BadOptionsAreRefused) {
  auto o = tiny_options(model::LongT5AttentionType::transient_global, true);
  o.global_block_size = 0;
  EXPECT_THROW(model::LongT5TransientGlobalAttention{o}, std::invalid_argument);
  o = tiny_options(model::LongT5AttentionType::local, true);
  o.local_radius = -1;
  EXPECT_THROW(model::LongT5LocalAttention{o}, std::invalid_argument);
  o = tiny_options(model::LongT5AttentionType::local, true);
  o.heads = 0;
  EXPECT_THROW(model::LongT5EncoderBlock{o}, std::invalid_argument);
  model::LongT5LocalAttention attention(tiny_options(model::LongT5AttentionType::local, true));
  EXPECT_THROW(attention->forward(torch::zeros({1, 10, 32}), torch::ones({1, 9})), c10::Error);
}

}  // namespace
}  // namespace fitsum::test
