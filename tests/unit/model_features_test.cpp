// The model reads feature fields, never a family: module_layout picks the module tree, and each layout builds one
// block variant, which ModelConfig::validate enforces by naming the field that disagrees; architecture_difference
// tells the layouts apart.
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/model/config.h"
#include "fitsum/model/seq2seq.h"

namespace fitsum::test {
namespace {

// A small model in the blocks layout under a model_type that is not T5's: the fields alone decide the tree.
model::ModelConfig blocks_config() {
  model::ModelConfig c;
  c.vocab_size = 40;
  c.d_model = 16;
  c.encoder_layers = c.decoder_layers = 2;
  c.encoder_attention_heads = c.decoder_attention_heads = 2;
  c.encoder_ffn_dim = c.decoder_ffn_dim = 24;
  c.max_position_embeddings = 64;
  c.module_layout = model::ModuleLayout::blocks;
  c.position_embedding = model::PositionEmbedding::relative;
  c.normalization = model::Normalization::rms_norm;
  c.linear_bias = false;
  c.scale_attention_scores = false;
  c.has_final_logits_bias = false;
  return c;
}

std::string validation_error(const model::ModelConfig& c) {
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ModelFeatures, EachLayoutBuildsOneBlockVariant) {
  EXPECT_EQ(validation_error(model::ModelConfig{}), "");
  EXPECT_EQ(validation_error(blocks_config()), "");

  auto table = blocks_config();
  table.position_embedding = model::PositionEmbedding::sinusoidal;
  EXPECT_EQ(validation_error(table),
            "config field 'position_embedding' must be relative with module_layout blocks: the only variant that "
            "layout builds");
  auto layer_norm = blocks_config();
  layer_norm.normalization = model::Normalization::layer_norm;
  EXPECT_EQ(validation_error(layer_norm),
            "config field 'normalization' must be rms_norm with module_layout blocks: the only variant that layout "
            "builds");
  auto biased = blocks_config();
  biased.linear_bias = true;
  EXPECT_EQ(validation_error(biased),
            "config field 'linear_bias' must be false with module_layout blocks: the only variant that layout builds");

  model::ModelConfig relative;
  relative.position_embedding = model::PositionEmbedding::relative;
  EXPECT_EQ(validation_error(relative),
            "config field 'position_embedding' must be sinusoidal, learned or computed with module_layout layers: the "
            "only variant that layout builds");
  model::ModelConfig rms;
  rms.normalization = model::Normalization::rms_norm;
  EXPECT_EQ(validation_error(rms),
            "config field 'normalization' must be layer_norm with module_layout layers: the only variant that layout "
            "builds");
  // The model refuses what validate refuses.
  EXPECT_THROW({ model::Seq2SeqLM built(table); }, std::invalid_argument);
}

// The long-input encoders build their own family's layers; a config asking for another variant is refused.
TEST(ModelFeatures, EachLongInputEncoderBuildsItsOwnLayers) {
  model::ModelConfig global_local;
  global_local.encoder_attention = model::EncoderAttention::global_local;
  global_local.position_embedding = model::PositionEmbedding::computed;
  global_local.attention_bias = false;
  EXPECT_EQ(validation_error(global_local), "");
  auto biased = global_local;
  biased.attention_bias = true;
  EXPECT_EQ(validation_error(biased),
            "config field 'attention_bias' must be false with encoder_attention global_local: the only variant that "
            "encoder builds");
  auto post_ln = global_local;
  post_ln.normalize_before = false;
  EXPECT_EQ(validation_error(post_ln),
            "config field 'normalize_before' must be true with encoder_attention global_local: the only variant "
            "that encoder builds");
  auto odd = global_local;
  odd.block_size = 5;
  EXPECT_NE(validation_error(odd).find("config field 'block_size' must be even"), std::string::npos);
  odd.stagger_local_blocks = false;
  EXPECT_EQ(validation_error(odd), "");

  auto local = blocks_config();
  local.encoder_attention = model::EncoderAttention::local;
  EXPECT_EQ(validation_error(local), "");
  local.local_radius = -1;
  EXPECT_EQ(validation_error(local), "config field 'local_radius' must not be negative, found -1");
  auto layers = global_local;
  layers.encoder_attention = model::EncoderAttention::transient_global;
  EXPECT_EQ(validation_error(layers),
            "config field 'module_layout' must be blocks with encoder_attention transient_global: the only variant "
            "that encoder builds");
  EXPECT_THROW({ model::Seq2SeqLM built(layers); }, std::invalid_argument);
}

// The parameters a long-input model registers are the ones count_parameters predicts, tensor by tensor.
TEST(ModelFeatures, LongInputEncodersCountTheirParameters) {
  model::ModelConfig pegasus_x;
  pegasus_x.vocab_size = 40;
  pegasus_x.d_model = 16;
  pegasus_x.encoder_layers = 3;
  pegasus_x.decoder_layers = 2;
  pegasus_x.encoder_attention_heads = pegasus_x.decoder_attention_heads = 2;
  pegasus_x.encoder_ffn_dim = pegasus_x.decoder_ffn_dim = 24;
  pegasus_x.encoder_attention = model::EncoderAttention::global_local;
  pegasus_x.position_embedding = model::PositionEmbedding::computed;
  pegasus_x.attention_bias = false;
  pegasus_x.has_final_logits_bias = false;
  pegasus_x.block_size = 4;
  pegasus_x.num_global_tokens = 3;
  auto transient_global = blocks_config();
  transient_global.encoder_attention = model::EncoderAttention::transient_global;
  auto local = blocks_config();
  local.encoder_attention = model::EncoderAttention::local;
  for (const auto& config : {pegasus_x, transient_global, local}) {
    model::Seq2SeqLM built(config);
    std::int64_t trainable = 0;
    std::int64_t frozen = 0;
    for (const auto& p : built->parameters()) trainable += p.numel();
    for (const auto& b : built->buffers()) frozen += b.numel();
    const auto counts = model::count_parameters(config);
    EXPECT_EQ(counts.trainable, trainable) << model::to_string(config.encoder_attention);
    EXPECT_EQ(counts.frozen, frozen) << model::to_string(config.encoder_attention);
    EXPECT_EQ(counts.trainable_tensors.size(), built->parameters().size()) << model::to_string(config.encoder_attention);
  }
}

TEST(ModelFeatures, ArchitectureDifferenceNamesTheModuleLayout) {
  auto layers = blocks_config();
  layers.module_layout = model::ModuleLayout::layers;
  const auto difference = model::architecture_difference(layers, blocks_config());
  ASSERT_TRUE(difference);
  EXPECT_EQ(difference->field, "module_layout");
  EXPECT_EQ(difference->first, "layers");
  EXPECT_EQ(difference->second, "blocks");
  EXPECT_FALSE(model::architecture_difference(blocks_config(), blocks_config()));
}

TEST(ModelFeatures, BlocksLayoutBuildsTheBlockTreeWhateverTheModelType) {
  const auto config = blocks_config();
  ASSERT_EQ(config.model_type, "pegasus");
  model::Seq2SeqLM model(config);
  const auto names = model->named_parameters();
  EXPECT_TRUE(names.contains("shared.weight"));
  EXPECT_FALSE(names.contains("model.shared.weight"));
  EXPECT_TRUE(names.contains("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"));
  EXPECT_FALSE(names.contains("encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"));
  EXPECT_TRUE(names.contains("decoder.block.1.layer.1.EncDecAttention.o.weight"));
  EXPECT_FALSE(names.contains("decoder.block.1.layer.1.EncDecAttention.o.bias"));
  EXPECT_TRUE(names.contains("decoder.block.1.layer.2.DenseReluDense.wo.weight"));
  EXPECT_TRUE(names.contains("decoder.final_layer_norm.weight"));
  EXPECT_FALSE(model->final_logits_bias.defined());
  std::int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  EXPECT_EQ(parameters, model::count_parameters(config).trainable);

  // Initialised as the blocks are (T5PreTrainedModel._init_weights): RMSNorm weights at initializer_factor.
  model::init_weights(*model, 7);
  const auto norm = names["encoder.final_layer_norm.weight"];
  EXPECT_TRUE(torch::equal(norm, torch::full_like(norm, config.init_std)));
}

}  // namespace
}  // namespace fitsum::test
