// `fitsum info` as a user runs it: real HF folders, a config-only folder, and corrupted copies that must fail with
// a clear message and a non-zero exit, never a crash.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

CommandResult info(const fs::path& dir, const std::string& extra = "") {
  return run_command(fitsum_binary().string() + " info --model '" + dir.string() + "' " + extra);
}

nlohmann::json info_json(const fs::path& dir) {
  auto result =
      run_command("(" + fitsum_binary().string() + " info --json --model '" + dir.string() + "' 2>/dev/null)");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return nlohmann::json::parse(result.output);
}

TEST(InfoCommand, ReportsTheHuggingFaceTinyCheckpoint) {
  FITSUM_REQUIRE_SHARED();
  const auto j = info_json(shared_dir() / "data" / "pegasus-tiny");
  EXPECT_EQ(j["architecture"]["vocab_size"], 5103);
  EXPECT_EQ(j["weights"]["validated"], true);
  EXPECT_EQ(j["weights"]["tensors_loaded"], 92);
  EXPECT_EQ(j["parameters"]["trainable"], 461248);
  // fp32 AdamW: 4 bytes of weights (all tensors) + 4 of gradients + 8 of moments per trainable parameter.
  const std::int64_t trainable = 461248, total = j["parameters"]["total"];
  EXPECT_EQ(j["training_memory_bytes"]["fp32"]["total_adamw"], 4 * total + 12 * trainable);
  const auto text = info(shared_dir() / "data" / "pegasus-tiny");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.output.find("5103"), std::string::npos);
}

TEST(InfoCommand, ConfigOnlyFolderReportsPegasusLargeCounts) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("config-only");
  fs::copy_file(shared_dir() / "data" / "pegasus" / "config.json", dir / "config.json");
  const auto j = info_json(dir);
  EXPECT_EQ(j["parameters"]["trainable"], 568699904);
  EXPECT_TRUE(j["weights"].is_null());
  EXPECT_EQ(j["training_memory_bytes"]["fp32"]["adamw_state"], 8LL * 568699904);
  const auto text = info(dir);
  EXPECT_NE(text.output.find("568,699,904"), std::string::npos) << text.output;
}

// configs/{bart-large-cnn,...,flan-t5-large}: the trainable count equals what transformers reports for the same
// config.json (tests/data/family_param_counts.json, from tests/data/make_family_fixtures.py).
TEST(InfoCommand, FamilyConfigsHaveHuggingFacesParameterCounts) {
  const auto expected = util::read_json_file(source_dir() / "tests" / "data" / "family_param_counts.json");
  ASSERT_EQ(expected["models"].size(), 6u);
  for (const auto& [name, model] : expected["models"].items()) {
    const auto j = info_json(source_dir() / "configs" / name);
    EXPECT_EQ(j["parameters"]["trainable"], model["num_parameters"]) << name;
    // BART's only buffer is final_logits_bias (1, vocab); T5 has none.
    const std::int64_t buffers = model["buffers"].contains("final_logits_bias")
                                     ? model["buffers"]["final_logits_bias"][1].get<std::int64_t>()
                                     : 0;
    EXPECT_EQ(j["parameters"]["frozen"], buffers) << name;
  }
}

TEST(InfoCommand, ForwardPassOnRandomInitIsNearUniformLoss) {
  FITSUM_REQUIRE_SHARED();
  auto result = run_command(fitsum_binary().string() + " info --json --forward --model '" +
                            (shared_dir() / "fixtures" / "tiny-pegasus").string() + "'");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto j = nlohmann::json::parse(result.output);
  EXPECT_EQ(j["forward"]["weights"], "loaded");
  EXPECT_TRUE(std::isfinite(j["forward"]["loss"].get<double>()));
}

class CorruptedCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(shared_dir() / "data")) GTEST_SKIP() << "no reference material";
    dir_ = temp_dir("copy");
    for (const auto& e : fs::directory_iterator(shared_dir() / "data" / "pegasus-tiny")) {
      fs::copy_file(e.path(), dir_ / e.path().filename());
      fs::permissions(dir_ / e.path().filename(), fs::perms::owner_write, fs::perm_options::add);
    }
  }
  void expect_clean_failure(const std::string& needle) {
    const auto result = info(dir_);
    EXPECT_EQ(result.exit_code, 1) << result.output;  // an error, not a signal
    EXPECT_NE(result.output.find("fitsum: error:"), std::string::npos) << result.output;
    EXPECT_NE(result.output.find(needle), std::string::npos) << result.output;
  }
  fs::path dir_;
};

TEST_F(CorruptedCopy, TruncatedWeights) {
  const auto bytes = util::read_file(dir_ / "model.safetensors");
  std::ofstream(dir_ / "model.safetensors", std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  expect_clean_failure("past the end");
}

TEST_F(CorruptedCopy, HeaderOffsetsPastTheEnd) {
  edit_safetensors_header(dir_ / "model.safetensors",
                          [](nlohmann::json& h) { h["final_logits_bias"]["data_offsets"][1] = 99999999; });
  expect_clean_failure("'final_logits_bias' has data_offsets [0, 99999999] past the end");
}

TEST_F(CorruptedCopy, WrongShapeInConfig) {
  auto config = util::read_json_file(dir_ / "config.json");
  config["d_model"] = 32;
  config["encoder_attention_heads"] = 2;
  util::write_json_file_atomic(dir_ / "config.json", config);
  expect_clean_failure("'model.decoder.embed_positions.weight' has shape [1024, 64], expected [1024, 32]");
}

TEST_F(CorruptedCopy, BrokenConfigJson) {
  std::ofstream(dir_ / "config.json", std::ios::trunc) << "{\"model_type\": \"pegasus\",";
  expect_clean_failure("config.json' is not valid JSON");
}

TEST(InfoCommand, MissingFolderAndMissingFlag) {
  auto result = run_command(fitsum_binary().string() + " info --model /nonexistent/model");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("does not exist"), std::string::npos) << result.output;
  result = run_command(fitsum_binary().string() + " info");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("--model"), std::string::npos) << result.output;
}

// The programs are linked with TCMalloc unless the build found none (CMakeLists.txt): a link that silently dropped
// it (the linker's --as-needed, a missing library) shows here, in the allocator the binary reports.
TEST(VersionFlag, NamesLibTorchBlasAndTheHostAllocatorTheBinaryRunsOn) {
  const auto result = run_command(fitsum_binary().string() + " --version");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output.rfind("fitsum 0.1.0\nLibTorch ", 0), 0u) << result.output;
  EXPECT_NE(result.output.find(", BLAS: "), std::string::npos) << result.output;
  const std::string expected =
      FITSUM_LINKED_TCMALLOC ? "host allocator: TCMalloc (gperftools " : "host allocator: glibc malloc";
  EXPECT_NE(result.output.find(expected), std::string::npos) << result.output;
}

}  // namespace
}  // namespace fitsum::test
