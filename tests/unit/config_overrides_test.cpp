// --config_overrides as transformers' PretrainedConfig.update_from_string applies it to the family's config class
// (expected values from transformers 4.47.1's T5Config / PegasusConfig / BartConfig): keys are the config object's
// attributes, config.json's or not; the attribute's type decides the parse (Python's int() / float()); attributes
// derived at construction (T5's num_decoder_layers) keep their constructed value.
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/io/hf_config.h"
#include "fitsum/model/config.h"
#include "test_support.h"

namespace fitsum::io {
namespace {

nlohmann::json t5_without_decoder_depth() {
  return {{"model_type", "t5"}, {"vocab_size", 64}, {"d_model", 16}, {"d_kv", 4},
          {"d_ff", 32},         {"num_layers", 6},  {"num_heads", 4}};
}

TEST(ConfigOverrides, T5NumLayersAloneLeavesTheDecoderAtItsConstructedDepth) {
  auto config = t5_without_decoder_depth();  // T5Config built from it: num_decoder_layers = num_layers = 6
  apply_config_overrides(config, "num_layers=2");
  const auto model = model_config_from_hf(config, "config.json");
  EXPECT_EQ(model.encoder_layers, 2);
  EXPECT_EQ(model.decoder_layers, 6);  // transformers: T5Config(num_layers=6).update_from_string("num_layers=2")
}

TEST(ConfigOverrides, AttributesOfTheConfigClassAreKeysEvenWhenConfigJsonOmitsThem) {
  auto config = t5_without_decoder_depth();
  apply_config_overrides(config, "num_decoder_layers=3,dropout_rate=0.25,hidden_size=32");
  const auto model = model_config_from_hf(config, "config.json");
  EXPECT_EQ(model.encoder_layers, 6);
  EXPECT_EQ(model.decoder_layers, 3);
  EXPECT_DOUBLE_EQ(model.dropout, 0.25);
  EXPECT_EQ(model.d_model, 32);  // hidden_size is T5Config's attribute_map name of d_model

  nlohmann::json pegasus = {{"model_type", "pegasus"},
                            {"d_model", 16},
                            {"encoder_attention_heads", 2},
                            {"decoder_attention_heads", 2},
                            {"vocab_size", 64}};
  apply_config_overrides(pegasus, "dropout=0.25,scale_embedding=Yes,num_attention_heads=4,d_model=010");
  EXPECT_EQ(pegasus["dropout"], 0.25);
  EXPECT_EQ(pegasus["scale_embedding"], true);
  EXPECT_EQ(pegasus["encoder_attention_heads"], 4);  // PegasusConfig maps num_attention_heads to the encoder's
  EXPECT_EQ(pegasus["decoder_attention_heads"], 2);
  EXPECT_EQ(pegasus["d_model"], 10);  // Python's int("010"), not octal 8
}

TEST(ConfigOverrides, AFeedForwardProjectionOverrideChangesNoDerivedActivation) {
  auto config = t5_without_decoder_depth();  // relu: dense_act_fn relu, is_gated_act false at construction
  apply_config_overrides(config, "feed_forward_proj=gated-gelu");
  const auto model = model_config_from_hf(config, "config.json");
  EXPECT_FALSE(model.gated_ffn);
  EXPECT_STREQ(model::to_string(model.activation_function), "relu");
}

TEST(ConfigOverrides, WhatUpdateFromStringRefusesIsRefusedWithItsReason) {
  nlohmann::json pegasus = {{"model_type", "pegasus"}, {"d_model", 16}};
  auto message =
      test::error_of<std::invalid_argument>([&] { apply_config_overrides(pegasus, "num_decoder_layers=2"); });
  EXPECT_NE(message.find("key num_decoder_layers isn't in the original config dict"), std::string::npos) << message;
  message = test::error_of<std::invalid_argument>(
      [&] { apply_config_overrides(pegasus, "forced_bos_token_id=0"); });  // None in PegasusConfig
  EXPECT_NE(message.find("only int, float, bool or string"), std::string::npos) << message;
  message = test::error_of<std::invalid_argument>([&] { apply_config_overrides(pegasus, "d_model=0x10"); });
  EXPECT_NE(message.find("is not a decimal integer"), std::string::npos) << message;
  message = test::error_of<std::invalid_argument>([&] { apply_config_overrides(pegasus, "dropout=0.1,"); });
  EXPECT_NE(message.find("is not key=value"), std::string::npos) << message;
  message = test::error_of<std::invalid_argument>([&] { apply_config_overrides(pegasus, "activation_function=a=b"); });
  EXPECT_NE(message.find("is not key=value"), std::string::npos) << message;
  message = test::error_of<std::invalid_argument>([&] { apply_config_overrides(pegasus, "scale_embedding=maybe"); });
  EXPECT_NE(message.find("expected true or false"), std::string::npos) << message;
  EXPECT_EQ(pegasus["d_model"], 16);
}

}  // namespace
}  // namespace fitsum::io

namespace fitsum::io {
namespace {

// generate() reads the config object's token ids, which hold the config class's defaults for what config.json leaves
// out (transformers 4.47.1: PegasusXConfig().eos_token_id == 1, BartConfig().forced_eos_token_id == 2,
// T5Config().decoder_start_token_id is None).
TEST(ClassTokenIds, FillWhatConfigJsonLeavesOutFromTheConfigClass) {
  const auto pegasus_x = with_class_token_ids({{"model_type", "pegasus_x"}, {"d_model", 16}});
  EXPECT_EQ(pegasus_x["eos_token_id"], 1);
  EXPECT_EQ(pegasus_x["forced_eos_token_id"], 1);
  EXPECT_EQ(pegasus_x["decoder_start_token_id"], 0);
  EXPECT_EQ(pegasus_x["pad_token_id"], 0);
  const auto bart = with_class_token_ids({{"model_type", "bart"}, {"eos_token_id", 5}});
  EXPECT_EQ(bart["eos_token_id"], 5);  // the file's value stands
  EXPECT_EQ(bart["forced_eos_token_id"], 2);
  EXPECT_EQ(bart["bos_token_id"], 0);
  const auto t5 = with_class_token_ids({{"model_type", "t5"}});
  EXPECT_EQ(t5["eos_token_id"], 1);
  EXPECT_FALSE(t5.contains("decoder_start_token_id"));  // None in T5Config: left out
  EXPECT_FALSE(t5.contains("d_model"));                 // only token ids are added
  const nlohmann::json unknown = {{"model_type", "gpt2"}};
  EXPECT_EQ(with_class_token_ids(unknown), unknown);
  // generation_config.json derived from such a config carries them too.
  EXPECT_EQ(generation_config_from_hf({{"model_type", "pegasus_x"}})["eos_token_id"], 1);
}

}  // namespace
}  // namespace fitsum::io
