// PEGASUS-X's encoder pieces (model/pegasus_x_layers.h) against transformers' modeling_pegasus_x.py itself:
// tests/data/fixtures/pegasus-x-layer/reference.safetensors, written by tests/data/make_pegasus_x_fixtures.py with
// transformers 4.47.1 on torch 1.13 (a seeded random encoder of d_model 32, 4 heads, ffn 64, block_size 4, 2 global
// tokens, 2 layers; a batch of 2 rows of length 10, one with 3 padding positions). HF's weights are loaded by name
// into fitsum's modules; outputs and the gradients of the inputs and of every parameter are compared in float32
// within 1e-5 of the reference's largest magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fitsum/io/safetensors.h"
#include "fitsum/model/activation_checkpoint.h"
#include "fitsum/model/pegasus_x_layers.h"
#include "fitsum/model/seq2seq.h"
#include "layer_reference.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

constexpr double kBound = 1e-5;

const LayerReference& reference() {
  static const LayerReference fixture(source_dir() / "tests" / "data" / "fixtures" / "pegasus-x-layer" / "reference.safetensors",
                                      "pegasus-x", kBound);
  return fixture;
}

torch::Tensor hf(const std::string& name) { return reference().hf(name); }
void load_by_name(torch::nn::Module& module, const std::string& prefix) { reference().load_by_name(module, prefix); }

model::PegasusXLayerOptions tiny_options(bool stagger) {
  model::PegasusXLayerOptions o;
  o.d_model = 32;
  o.heads = 4;
  o.ffn_dim = 64;
  o.block_size = 4;
  o.stagger_blocks = stagger;
  o.activation = model::Activation::gelu;
  return o;
}

TEST(PegasusXLayers, ParameterNamesAreTransformersKeysInTheirOrder) {
  model::PegasusXEncoderLayer layer(tiny_options(true));
  std::vector<std::string> names;
  for (const auto& p : layer->named_parameters()) names.push_back(p.key());
  const std::vector<std::string> hf = {"self_attn.k_proj.weight",
                                       "self_attn.v_proj.weight",
                                       "self_attn.q_proj.weight",
                                       "self_attn.out_proj.weight",
                                       "self_attn_layer_norm.weight",
                                       "self_attn_layer_norm.bias",
                                       "global_self_attn_layer_norm.weight",
                                       "global_self_attn_layer_norm.bias",
                                       "fc1.weight",
                                       "fc1.bias",
                                       "fc2.weight",
                                       "fc2.bias",
                                       "final_layer_norm.weight",
                                       "final_layer_norm.bias"};
  EXPECT_EQ(names, hf);  // PegasusXEncoderLayer.state_dict()'s order
  load_by_name(*layer, "encoder.layers.1.");
}

TEST(PegasusXLayers, SinusoidalPositionsMatchTransformers) {
  Comparison c{reference()};
  c.expect(model::pegasus_x_positions(40, 32, 0, torch::kFloat, torch::kCPU), "positions.d32.p0");
  c.expect(model::pegasus_x_positions(8, 32, 16380, torch::kFloat, torch::kCPU), "positions.d32.p16380");
  c.expect(model::pegasus_x_positions(10, 6, 0, torch::kFloat, torch::kCPU), "positions.d6.p0");
  c.report("positions");
  // Not PEGASUS's table: the frequencies divide by half - 1, not by the width.
  EXPECT_FALSE(torch::allclose(model::pegasus_x_positions(40, 32, 0, torch::kFloat, torch::kCPU),
                               model::sinusoidal_table(40, 32)));
  EXPECT_THROW(model::pegasus_x_positions(4, 7, 0, torch::kFloat, torch::kCPU), std::invalid_argument);
  EXPECT_THROW(model::pegasus_x_positions(4, 2, 0, torch::kFloat, torch::kCPU), std::invalid_argument);
}

// What PegasusXEncoder.forward hands its first layer: embeddings plus positions, padded to the blocks with zeros,
// the additive mask padded with the lowest value, and the global tokens' embeddings.
TEST(PegasusXLayers, BlockPaddingAndGlobalTokensAreWhatTheEncoderPassesItsLayers) {
  const auto embeds = hf("input.embeds");  // (2, 10, 32)
  const auto hidden = embeds + model::pegasus_x_positions(10, 32, 0, torch::kFloat, torch::kCPU).unsqueeze(0);
  const auto padded = model::pad_to_blocks(hidden, reference().reader().read("input.attention_mask"), 4);
  Comparison c{reference()};
  c.expect(padded.hidden, "capture.layers.0.hidden");
  EXPECT_TRUE(torch::equal(padded.mask, hf("capture.layers.0.mask")));
  torch::nn::Embedding embed_global(2, 32);
  {
    torch::NoGradGuard no_grad;
    embed_global->weight.copy_(hf("encoder.embed_global.weight"));
  }
  c.expect(model::global_token_states(embed_global->weight, 2), "capture.layers.0.global");
  c.report("encoder inputs");
  // A length already a multiple of the block is left as it is.
  EXPECT_EQ(model::pad_to_blocks(hidden.narrow(1, 0, 8), torch::ones({2, 8}), 4).hidden.size(1), 8);
}

class PegasusXLayerParity : public ::testing::TestWithParam<bool> {};

TEST_P(PegasusXLayerParity, OutputsAndEveryGradientMatchTransformers) {
  const bool stagger = GetParam();
  const std::string prefix = stagger ? "layer.stagger." : "layer.plain.";
  model::PegasusXEncoderLayer layer(tiny_options(stagger));
  load_by_name(*layer, "encoder.layers.1.");
  layer->eval();
  const auto hidden = hf("capture.layers.1.hidden").requires_grad_(true);  // (2, 12, 32)
  const auto global = hf("capture.layers.1.global").requires_grad_(true);  // (2, 2, 32)
  const auto out = layer->forward(hidden, global, hf("capture.layers.1.mask"));
  ((out.hidden * hf("layer.grad_out.hidden")).sum() + (out.global * hf("layer.grad_out.global")).sum()).backward();
  Comparison c{reference()};
  c.expect(out.hidden, prefix + "out.hidden");
  c.expect(out.global, prefix + "out.global");
  c.expect(hidden.grad(), prefix + "grad.input.hidden");
  c.expect(global.grad(), prefix + "grad.input.global");
  for (const auto& p : layer->named_parameters()) c.expect(p.value().grad(), prefix + "grad." + p.key());
  c.report(prefix + "outputs and gradients");
}

INSTANTIATE_TEST_SUITE_P(Stagger, PegasusXLayerParity, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Staggered" : "Aligned"; });

// The pieces composed as PegasusXEncoder.forward composes them (inputs_embeds in, last_hidden_state out), so that
// which layers stagger (layer 1 of 2 here) is checked against transformers too. Module names are HF's encoder keys.
struct TinyEncoder : torch::nn::Module {
  TinyEncoder() {
    embed_global = register_module("embed_global", torch::nn::Embedding(2, 32));
    layers = register_module("layers", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < 2; ++i) {
      layers->push_back(model::PegasusXEncoderLayer(tiny_options(model::staggers_blocks(i, true))));
    }
    layer_norm = register_module("layer_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({32})));
  }
  torch::Tensor forward(const torch::Tensor& embeds, const torch::Tensor& attention_mask) {
    const auto length = embeds.size(1);
    auto states = model::pad_to_blocks(
        embeds + model::pegasus_x_positions(length, 32, 0, embeds.scalar_type(), embeds.device()).unsqueeze(0),
        attention_mask, 4);
    model::PegasusXStates s{states.hidden, model::global_token_states(embed_global->weight, embeds.size(0))};
    for (const auto& layer : *layers)
      s = layer->as<model::PegasusXEncoderLayer>()->forward(s.hidden, s.global, states.mask);
    return layer_norm->forward(s.hidden.narrow(1, 0, length));
  }
  torch::nn::Embedding embed_global{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};
};

TEST(PegasusXLayers, TwoLayerEncoderMatchesTransformers) {
  TinyEncoder encoder;
  load_by_name(encoder, "encoder.");
  encoder.eval();
  EXPECT_FALSE(encoder.layers[0]->as<model::PegasusXEncoderLayer>()->options().stagger_blocks);
  EXPECT_TRUE(encoder.layers[1]->as<model::PegasusXEncoderLayer>()->options().stagger_blocks);
  const auto embeds = hf("input.embeds").requires_grad_(true);
  const auto out = encoder.forward(embeds, reference().reader().read("input.attention_mask"));
  (out * hf("encoder.grad_out")).sum().backward();
  Comparison c{reference()};
  c.expect(out, "encoder.out");
  c.expect(embeds.grad(), "encoder.grad.input.embeds");
  for (const auto& p : encoder.named_parameters()) c.expect(p.value().grad(), "encoder.grad." + p.key());
  c.report("two-layer encoder");
}

// Training mode with dropout 0.1, attention_dropout 0.2 and activation_dropout 0.3: with torch::dropout (the byte-mask
// kernel off) the same seed draws transformers' masks, so every dropout is at HF's place, in HF's order, at its rate.
TEST(PegasusXLayers, DropoutIsAppliedWhereTransformersAppliesIt) {
  auto options = tiny_options(true);
  options.dropout = 0.1;
  options.attention_dropout = 0.2;
  options.activation_dropout = 0.3;
  options.byte_mask_dropout = false;
  model::PegasusXEncoderLayer layer(options);
  load_by_name(*layer, "encoder.layers.1.");
  layer->train();
  const auto hidden = hf("capture.layers.1.hidden").requires_grad_(true);
  const auto global = hf("capture.layers.1.global").requires_grad_(true);
  torch::manual_seed(4455);  // the fixture's dropout seed
  const auto out = layer->forward(hidden, global, hf("capture.layers.1.mask"));
  ((out.hidden * hf("layer.grad_out.hidden")).sum() + (out.global * hf("layer.grad_out.global")).sum()).backward();
  Comparison c{reference()};
  c.expect(out.hidden, "dropout.out.hidden");
  c.expect(out.global, "dropout.out.global");
  c.expect(hidden.grad(), "dropout.grad.input.hidden");
  c.expect(global.grad(), "dropout.grad.input.global");
  c.report("dropout");
  // And the evaluation outputs differ from these: dropout did act.
  EXPECT_FALSE(torch::allclose(out.hidden, hf("layer.stagger.out.hidden"), 1e-3, 1e-3));
}

// Per-layer activation checkpointing (model/activation_checkpoint.h) replays the random state, so a checkpointed
// staggered layer with every dropout on (fitsum's byte-mask kernel) gives the plain run's outputs and gradients.
TEST(PegasusXLayers, CheckpointedLayerReplaysItsDropout) {
  auto options = tiny_options(true);
  options.dropout = 0.1;
  options.attention_dropout = 0.2;
  options.activation_dropout = 0.3;
  model::PegasusXEncoderLayer layer(options);
  load_by_name(*layer, "encoder.layers.1.");
  layer->train();
  const auto mask = hf("capture.layers.1.mask");
  std::vector<std::vector<torch::Tensor>> runs;
  for (const bool checkpointed : {false, true}) {
    layer->zero_grad();
    const auto hidden = hf("capture.layers.1.hidden").requires_grad_(true);
    const auto global = hf("capture.layers.1.global").requires_grad_(true);
    const auto block = [&](const model::TensorList& in) {
      const auto out = layer->forward(in[0], in[1], mask);
      return model::TensorList{out.hidden, out.global};
    };
    torch::manual_seed(7);
    const auto out = checkpointed ? model::checkpoint(block, {hidden, global}) : block({hidden, global});
    ((out[0] * hf("layer.grad_out.hidden")).sum() + (out[1] * hf("layer.grad_out.global")).sum()).backward();
    runs.push_back({out[0].detach(), out[1].detach(), hidden.grad(), global.grad()});
    for (const auto& p : layer->parameters()) runs.back().push_back(p.grad().clone());
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (std::size_t i = 0; i < runs[0].size(); ++i) EXPECT_TRUE(torch::equal(runs[0][i], runs[1][i])) << "tensor " << i;
  EXPECT_FALSE(torch::allclose(runs[0][0], hf("layer.stagger.out.hidden"), 1e-3, 1e-3));  // dropout acted
}

TEST(PegasusXLayers, BadShapesAreRefused) {
  auto odd = tiny_options(true);
  odd.block_size = 5;
  EXPECT_THROW(model::PegasusXEncoderLayer{odd}, std::invalid_argument);
  odd.stagger_blocks = false;
  EXPECT_NO_THROW(model::PegasusXEncoderLayer{odd});  // HF runs an odd block in an unstaggered layer
  auto heads = tiny_options(false);
  heads.heads = 5;
  EXPECT_THROW(model::PegasusXEncoderLayer{heads}, std::invalid_argument);
  model::PegasusXGlobalLocalAttention attention(32, 4, 4);
  EXPECT_THROW(attention->forward(torch::zeros({1, 10, 32}), torch::zeros({1, 2, 32}), torch::zeros({1, 10})),
               c10::Error);  // 10 positions are not whole blocks of 4
}

}  // namespace
}  // namespace fitsum::test
