// `fitsum bench train --shape NAME` for the released long-input architectures the families name (pegasus-x-base,
// ...): the model is the checkpoint's config (configs/NAME), and an unknown name is a usage error listing them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace fitsum::test {
namespace {

// A narrow copy (the checkpoint's structure at d_model 64), a source that is not a multiple of the 512-token block.
const std::string kNarrow =
    " --config_overrides d_model=64,encoder_attention_heads=4,decoder_attention_heads=4,encoder_ffn_dim=128,"
    "decoder_ffn_dim=128,encoder_layers=2,decoder_layers=1,vocab_size=1000 --src_len 600 --tgt_len 8 --batch 1 "
    "--steps 1 --warmup 0 2>&1";

nlohmann::json last_json_line(const std::string& output) {
  const auto start = output.rfind("\n{");
  return nlohmann::json::parse(output.substr(start == std::string::npos ? 0 : start + 1));
}

TEST(BenchShapes, PegasusXBaseIsTheCheckpointsConfig) {
  const auto bench = fitsum_binary().string() + " bench train";
  const auto by_shape = run_command(bench + " --shape pegasus-x-base" + kNarrow);
  ASSERT_EQ(by_shape.exit_code, 0) << by_shape.output;
  const auto by_file =
      run_command(bench + " --config_name " + (source_dir() / "configs" / "pegasus-x-base").string() + kNarrow);
  ASSERT_EQ(by_file.exit_code, 0) << by_file.output;
  const auto shape = last_json_line(by_shape.output);
  const auto file = last_json_line(by_file.output);
  EXPECT_EQ(shape["shape"], "pegasus-x-base");
  EXPECT_EQ(shape["src_len"], 600);
  // The same seed, weights and tokens: the same loss to the last bit, and the same counted products.
  EXPECT_EQ(shape["loss_last"].get<double>(), file["loss_last"].get<double>());
  EXPECT_EQ(shape["flops_per_step"].get<double>(), file["flops_per_step"].get<double>());
  // And not PEGASUS's base shape (full attention everywhere) under the same overrides.
  const auto pegasus = run_command(bench + " --shape base" + kNarrow);
  ASSERT_EQ(pegasus.exit_code, 0) << pegasus.output;
  EXPECT_NE(last_json_line(pegasus.output)["loss_last"].get<double>(), shape["loss_last"].get<double>());
}

TEST(BenchShapes, AnUnknownShapeIsAUsageErrorNamingTheShapes) {
  const auto run = run_command(fitsum_binary().string() + " bench train --shape pegasus-x-huge 2>&1");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("fitsum: error: --shape 'pegasus-x-huge' is not a shape; choose tiny, small, base, large, "
                            "pegasus-x-base, pegasus-x-large, long-t5-tglobal-base"),
            std::string::npos)
      << run.output;
}

}  // namespace
}  // namespace fitsum::test
