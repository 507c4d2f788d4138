// --offload_optimizer and --max_host_memory as users give them: bad values are one-line usage errors naming the flag,
// the args file takes DeepSpeed's {"device": "cpu"}, a training run logs the host's peak apart from the device's, and
// `fitsum plan` offloads where only that fits --max_memory, or names --max_host_memory when the host is too small.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

std::string fitsum() { return fitsum_binary().string(); }

int error_lines(const std::string& output) {
  int count = 0;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) count += line.rfind("fitsum: error:", 0) == 0 ? 1 : 0;
  return count;
}

std::string tiny_train(const fs::path& dir) {
  return fitsum() + " train --model_name_or_path '" + (shared_dir() / "fixtures" / "tiny-pegasus").string() +
         "' --train_file '" + write_copy_task_records(dir / "train.jsonl").string() + "' --output_dir '" +
         (dir / "out").string() + "' --disable_tqdm --save_strategy no ";
}

TEST(OffloadFlags, BadValuesAreOneLineUsageErrorsNamingTheFlag) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("offload-flags");
  const auto base = tiny_train(dir);
  struct Case {
    std::string flags;
    std::string names;
  };
  for (const auto& c : {Case{"--offload_optimizer gpu", "offload_optimizer 'gpu' is not one of none, cpu"},
                        Case{"--max_host_memory lots", "--max_host_memory"},
                        Case{"--max_host_memory 0", "--max_host_memory must be above 0"},
                        Case{"--offload_optimizer cpu --zero_stage 1",
                             "offload_optimizer cpu with zero_stage 1 is not implemented"}}) {
    const auto r = run_command(base + c.flags + " --max_steps 1");
    EXPECT_EQ(r.exit_code, 2) << c.flags << ": " << r.output;
    EXPECT_EQ(error_lines(r.output), 1) << c.flags << ": " << r.output;
    EXPECT_NE(r.output.find(c.names), std::string::npos) << c.flags << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir / "out" / "trainer_state.json")) << c.flags;
  }
}

TEST(OffloadFlags, ArgsFileTakesDeepSpeedsObjectAndTheRunLogsTheHostPeak) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("offload-args");
  util::write_json_file_atomic(dir / "args.json", nlohmann::json{{"offload_optimizer", {{"device", "cpu"}}},
                                                                 {"max_host_memory", "1GiB"},
                                                                 {"max_steps", 2},
                                                                 {"logging_steps", 1}});
  const auto command = tiny_train(dir);
  const auto r = run_command(fitsum() + " train '" + (dir / "args.json").string() + "'" +
                             command.substr(command.find(" --model_name_or_path")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto state = nlohmann::json::parse(util::read_file(dir / "out" / "trainer_state.json"));
  int logged = 0;
  for (const auto& entry : state["log_history"]) {
    if (!entry.contains("loss")) continue;
    ++logged;
    ASSERT_TRUE(entry.contains("peak_host_memory_bytes")) << entry.dump();
    EXPECT_GT(entry["peak_host_memory_bytes"].get<double>(), 0.0);
  }
  EXPECT_EQ(logged, 2) << state.dump();
}

std::string plan_model_args() {
  return " --config_name '" + (source_dir() / "configs" / "pegasus-tiny" / "config.json").string() +
         "' --config_overrides vocab_size=8000,d_model=256,encoder_layers=4,decoder_layers=4,encoder_ffn_dim=1024,"
         "decoder_ffn_dim=1024,encoder_attention_heads=8,decoder_attention_heads=8 ";
}

fs::path plan_records(const fs::path& dir) {
  std::ofstream out(dir / "train.jsonl");
  for (int i = 0; i < 8; ++i) {
    nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
    for (int j = 0; j < 39; ++j) ids.push_back(103 + (i * 13 + j * 7) % 500);
    ids.push_back(1);
    for (int j = 0; j < 11; ++j) labels.push_back(103 + (i * 11 + j * 5) % 500);
    labels.push_back(1);
    out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
  }
  return dir / "train.jsonl";
}

// About 9.5M parameters: AdamW's weights, gradients and state need about 150 MB, the weights and gradients 76 MB.
TEST(OffloadPlan, OffloadsWhereOnlyThatFitsAndNamesMaxHostMemoryWhenTheHostIsTooSmall) {
  const auto dir = temp_dir("offload-plan");
  const std::string plan = "(" + fitsum() + " plan" + plan_model_args() + "--train_file '" +
                           plan_records(dir).string() +
                           "' --per_device_train_batch_size 2 --optim adamw_torch --max_memory 120MiB ";
  // Without offload AdamW cannot fit: every on-device candidate below is refused.
  auto r = run_command(plan + "--offload_optimizer auto --format json 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  const auto& chosen = j["chosen"];
  EXPECT_EQ(chosen["offload_optimizer"], "cpu") << chosen.dump();
  EXPECT_EQ(chosen["breakdown"]["optimizer_state"], 0) << chosen.dump();
  const double gradients = chosen["breakdown"]["gradients"].get<double>();  // 4 bytes a trainable parameter
  const double host = chosen["breakdown"]["host"]["bytes"].get<double>();
  // AdamW's two moments and the copies of weights and gradients: 16 bytes a parameter (and the step's transient).
  EXPECT_NEAR(host / gradients, 4.0, 0.01) << chosen.dump();
  EXPECT_EQ(chosen["breakdown"]["host"]["transfer_bytes_each_way"], chosen["breakdown"]["gradients"]);
  bool on_device_planned = false;
  for (const auto& c : j["candidates"]) {
    if (c["offload_optimizer"] == "none") {
      on_device_planned = true;
      EXPECT_FALSE(c["fits"].get<bool>()) << c.dump();
    }
  }
  EXPECT_TRUE(on_device_planned);

  r = run_command(plan + "--offload_optimizer cpu --max_host_memory 100MiB 2>&1)");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("max_host_memory is 100.00 MiB: raise --max_host_memory"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace fitsum::test
