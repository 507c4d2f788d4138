// The LoRA flags of `fitsum train` (and `fitsum bench train`) as users type them, and an args JSON's `lora` object
// with PEFT's LoraConfig keys: a run trains adapters and says what trains; every bad value is a one-line usage
// error naming the flag or key.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace fitsum::test {
namespace {

fs::path fixture_dir() { return shared_dir() / "fixtures" / "tiny-pegasus"; }

// `args_json`: an args JSON standing first, as HF users pass one.
std::string train_command(const fs::path& dir, const fs::path& args_json = {}) {
  const std::string json = args_json.empty() ? "" : "'" + args_json.string() + "' ";
  return fitsum_binary().string() + " train " + json + "--model_name_or_path '" + fixture_dir().string() + "' --train_file '" +
         write_copy_task_records(dir / "train.jsonl").string() + "' --output_dir '" + (dir / "out").string() +
         "' --max_source_length 64 --max_target_length 64 --max_steps 2 --per_device_train_batch_size 4 --learning_rate 1e-2 --save_strategy no --logging_steps 1 ";
}

// The lines of stderr other than warnings (a warning such as the free-disk one depends on the machine).
std::size_t lines_of(const std::string& text) {
  std::size_t n = 0;
  std::size_t start = 0;
  for (auto end = text.find('\n'); end != std::string::npos; start = end + 1, end = text.find('\n', start)) {
    n += text.compare(start, 17, "fitsum: warning: ") == 0 ? 0 : 1;
  }
  return n;
}

TEST(LoraCli, TrainsAdaptersAndSaysWhatTrains) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("lora-cli-train");
  const auto r = run_command(train_command(dir) +
                             "--lora_r 4 --lora_alpha 16 --lora_target_modules q_proj,v_proj --lora_dropout 0.1 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA r 4, alpha 16 (scaling 4) on 12 layers (v_proj, q_proj)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("; adapter saved to "), std::string::npos) << r.output;  // not a model
}

TEST(LoraCli, ArgsJsonCarriesALoraObjectWithPeftKeys) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("lora-cli-json");
  const auto args = dir / "args.json";
  std::ofstream(args) << R"({"lora": {"r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "fc1"],
                             "use_rslora": true, "bias": "lora_only", "task_type": "SEQ_2_SEQ_LM"}})";
  const auto r = run_command(train_command(dir, args) + "--base_dtype bfloat16 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // rsLoRA: 4 / sqrt(2); q_proj and fc1 of 2 encoder layers, self and cross q_proj and fc1 of 2 decoder layers.
  EXPECT_NE(r.output.find("LoRA r 2, alpha 4 (scaling 2.82843, rsLoRA) on 10 layers (q_proj, fc1)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("held in bfloat16"), std::string::npos) << r.output;
}

struct BadFlags {
  std::string flags;
  std::string message;
};

void PrintTo(const BadFlags& bad, std::ostream* out) { *out << bad.flags; }

class LoraCliErrors : public ::testing::TestWithParam<BadFlags> {};

TEST_P(LoraCliErrors, AreOneLineUsageErrorsNamingTheFlag) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("lora-cli-errors");
  const auto r = run_command("(" + train_command(dir) + GetParam().flags + " 2>&1 >/dev/null)");  // stderr alone
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(lines_of(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("fitsum: error: " + GetParam().message), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out")) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Flags, LoraCliErrors,
    ::testing::Values(
        BadFlags{"--lora_alpha 16", "lora_alpha is a LoRA setting, but no adapters are trained: set lora_r"},
        BadFlags{"--lora_target_modules q_proj", "lora_target_modules is a LoRA setting"},
        BadFlags{"--use_rslora", "use_rslora is a LoRA setting"},
        BadFlags{"--base_dtype bfloat16", "base_dtype bfloat16 holds the frozen base of a LoRA run"},
        BadFlags{"--lora_r -2", "lora_r must be a positive integer (0: no adapters, full fine-tuning), got -2"},
        BadFlags{"--lora_r 4 --lora_dropout 1", "lora_dropout must be in [0, 1), got 1"},
        BadFlags{"--lora_r 4 --lora_alpha inf", "lora_alpha must be a finite number"},
        BadFlags{"--lora_r 4 --lora_bias some", "--lora_bias 'some' is not one of none, all, lora_only"},
        BadFlags{"--lora_r 4 --base_dtype float16", "--base_dtype 'float16' is not one of float32, bfloat16"},
        BadFlags{"--lora_r 4 --lora_target_modules q_proj,", "--lora_target_modules 'q_proj,' has an empty module name"},
        BadFlags{"--lora_r 4 --lora_target_modules all-linear,fc1", "lora_target_modules: all-linear stands alone"},
        BadFlags{"--lora_r 4 --lora_target_modules q", "lora target_modules q match no layer of the model"}));

TEST(LoraCli, ArgsJsonLoraObjectErrorsNameTheKey) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("lora-cli-json-errors");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"lora": {"r": 4, "alpha": 8}})", "lora has the unknown key 'alpha'"},
      {R"({"lora": {"r": "4"}})", "lora.r must be a number"},
      {R"({"lora": {"r": 4, "target_modules": []}})", "lora.target_modules is an empty list"},
      {R"({"lora": {"r": 4, "task_type": "CAUSAL_LM"}})", "lora.task_type is \"CAUSAL_LM\""},
      {R"({"lora": [4]})", "lora must be an object of PEFT LoraConfig fields"},
  };
  for (const auto& [json, message] : cases) {
    const auto args = dir / "args.json";
    std::ofstream(args) << json;
    const auto r = run_command("(" + fitsum_binary().string() + " train '" + args.string() + "' --output_dir '" +
                               (dir / "out").string() + "' 2>&1 >/dev/null)");
    EXPECT_EQ(r.exit_code, 2) << json << ": " << r.output;
    EXPECT_EQ(lines_of(r.output), 1u) << r.output;
    EXPECT_NE(r.output.find("'" + args.string() + "': " + message), std::string::npos) << r.output;
  }
}

TEST(LoraCli, BenchTrainRunsLoraSteps) {
  const auto r = run_command(fitsum_binary().string() +
                             " bench train --shape tiny --batch 1 --src_len 32 --tgt_len 8 --steps 1 --warmup 0 "
                             "--lora_r 16 --lora_target_modules all-linear 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fitsum: LoRA r 16, alpha 8 (scaling 0.5)"), std::string::npos) << r.output;
  const auto line = r.output.substr(r.output.find("{\"impl\""));
  const auto json = nlohmann::json::parse(line.substr(0, line.find('\n')));
  EXPECT_EQ(json["lora_r"], 16);
  EXPECT_GT(json["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(json["peak_tracked_mib"].get<double>(), 0.0);
  const auto bad = run_command(fitsum_binary().string() + " bench train --shape tiny --steps 1 --lora_alpha 4 2>&1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("lora_alpha is a LoRA setting"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace fitsum::test
