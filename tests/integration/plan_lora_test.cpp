// `fitsum plan` and `fitsum train --max_memory` with low-rank adapters, as users run them: a refusal of full
// fine-tuning names a LoRA configuration that fits (the planner never switches to it by itself), and that
// configuration, planned and trained, stays under the budget. FLAN-T5-XL's widths (configs/flan-t5-xl) at reduced
// depth here; its full depth is tests/slow/planner_lora_slow_test.cpp.
#include <fstream>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/bytes.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

// `count` pre-tokenized records of `source` and `target` tokens (eos last), ids below `vocab`.
fs::path write_fixed_records(const fs::path& dir, int count, int source, int target, int vocab) {
  std::ofstream out(dir / "train.jsonl");
  for (int i = 0; i < count; ++i) {
    nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
    for (int j = 0; j + 1 < source; ++j) ids.push_back(3 + (i * 13 + j * 7) % (vocab - 3));
    ids.push_back(1);
    for (int j = 0; j + 1 < target; ++j) labels.push_back(3 + (i * 11 + j * 5) % (vocab - 3));
    labels.push_back(1);
    out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
  }
  return dir / "train.jsonl";
}

// The refusal's suggestion: the flags after "; " up to " fits in ", and the predicted peak after it.
struct Suggestion {
  std::string flags;
  std::uint64_t peak = 0;
};
std::optional<Suggestion> suggestion_in(const std::string& output) {
  static const std::regex sentence(R"(Full fine-tuning needs (at least )?[0-9.]+ [KMGT]iB; (--lora_r [^;]*?) fits in )"
                                   R"(([0-9.]+ [KMGT]iB) \(predicted peak)");
  std::smatch m;
  if (!std::regex_search(output, m, sentence)) return std::nullopt;
  auto peak = m[3].str();
  peak.erase(peak.find(' '), 1);  // "1.02 GiB" as --max_memory spells it
  return Suggestion{m[2].str(), util::parse_bytes(peak)};
}

// FLAN-T5-XL (d_model 2048, d_ff 5120, 32 heads, 32128 tokens, untied head) at 1 + 1 layers: 245M parameters, 934
// MiB of float32 weights; full fine-tuning's weights and gradients alone need 1.8 GiB. Under 1.25 GiB (16 GiB's
// counterpart at this depth) the refusal names rank-16 adapters on every Linear, and `fitsum train` with those flags
// trains under the budget.
TEST(PlanLora, FlanT5XlAtReducedDepthTrainsTheSuggestedConfigurationUnderTheBudget) {
  const auto dir = temp_dir("plan-lora-flan-t5-xl");
  const auto data = write_fixed_records(dir, 4, 16, 8, 32128);
  const std::string budget = "1.25GiB";
  const std::string model = " --config_name '" + (source_dir() / "configs" / "flan-t5-xl").string() +
                            "' --config_overrides num_layers=1,num_decoder_layers=1 --train_file '" + data.string() +
                            "' --max_source_length 16 --max_target_length 8"
                            " --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --max_memory " + budget +
                            " --device cpu ";
  auto r = run_command(fitsum_binary().string() + " plan" + model);
  ASSERT_EQ(r.exit_code, 3) << r.output;  // full fine-tuning cannot fit, and LoRA is not chosen for the user
  const auto suggested = suggestion_in(r.output);
  ASSERT_TRUE(suggested) << r.output;
  EXPECT_EQ(suggested->flags, "--lora_r 16 --lora_target_modules all-linear") << r.output;
  EXPECT_LE(suggested->peak, util::parse_bytes(budget));

  r = run_command(fitsum_binary().string() + " train" + model + suggested->flags + " --output_dir '" +
                  (dir / "out").string() + "' --max_steps 1 --logging_steps 1 --save_strategy no");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto state = util::read_json_file(dir / "out" / "trainer_state.json");
  int entries = 0;
  for (const auto& e : state["log_history"]) {
    if (!e.contains("peak_memory_bytes")) continue;
    ++entries;
    const auto peak = e["peak_memory_bytes"].get<double>();
    EXPECT_LE(peak, static_cast<double>(util::parse_bytes(budget))) << e.dump();
    EXPECT_LE(e["predicted_peak_bytes"].get<double>() * 1.05, static_cast<double>(util::parse_bytes(budget)));
    // Within 10% of the prediction, and never more than the planner's 5% margin above it.
    EXPECT_GE(e["predicted_peak_bytes"].get<double>(), peak * 0.95) << e.dump();
    EXPECT_LE(e["predicted_peak_bytes"].get<double>(), peak * 1.10) << e.dump();
  }
  EXPECT_EQ(entries, 1);
}

// The refusal exits with 3 like any other and prints no plan; the suggested flags are the ones `fitsum train` takes.
// A refusal from the config alone comes before the data is read, so its LoRA plans are for the max lengths: here
// the data's.
TEST(PlanLora, TheRefusalNamesTheLoraFlagsAndThePlannerDoesNotSwitch) {
  const auto dir = temp_dir("plan-lora-refusal");
  const auto data = write_fixed_records(dir, 4, 40, 12, 8000);
  const std::string model =
      " --config_name '" + (source_dir() / "configs" / "pegasus-tiny" / "config.json").string() +
      "' --config_overrides vocab_size=8000,d_model=256,encoder_layers=4,decoder_layers=4,encoder_ffn_dim=1024,"
      "decoder_ffn_dim=1024,encoder_attention_heads=8,decoder_attention_heads=8 --train_file '" +
      data.string() + "' --max_source_length 40 --max_target_length 12 --per_device_train_batch_size 2 --device cpu ";
  auto r = run_command(fitsum_binary().string() + " plan" + model + "--max_memory 60MiB");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_EQ(r.output.find("flags: "), std::string::npos) << r.output;
  const auto suggested = suggestion_in(r.output);
  ASSERT_TRUE(suggested) << r.output;
  EXPECT_EQ(suggested->flags, "--lora_r 16 --lora_target_modules all-linear");
  r = run_command(fitsum_binary().string() + " train" + model + "--max_memory 60MiB --output_dir '" +
                  (dir / "out").string() + "' --max_steps 1 --save_strategy no");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("fitsum: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(suggested->flags + " fits in "), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out" / "trainer_state.json"));
}

}  // namespace
}  // namespace fitsum::test
