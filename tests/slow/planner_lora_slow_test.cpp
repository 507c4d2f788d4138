// FLAN-T5-XL at full depth (configs/flan-t5-xl: 2.85B parameters, 24 + 24 layers) under 16 GiB, label slow: full
// fine-tuning's weights and gradients alone (21.2 GiB) cannot fit, so `fitsum plan` refuses (exit 3) and names a LoRA
// configuration with its predicted peak; that configuration is then trained for one micro-batch of 512 source and 128
// target tokens (its accumulation does not change the peak: the gradients are accumulated in place) under the budget,
// and the measured peak is within 10% of the prediction. About 16 GiB of memory and tens of minutes on 2 cores.
#include <fstream>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/bytes.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

TEST(PlannerLoraSlow, FlanT5XlAtFullDepthTrainsTheSuggestedConfigurationUnder16GiB) {
  const auto dir = temp_dir("plan-lora-flan-t5-xl-full");
  {
    std::ofstream out(dir / "train.jsonl");
    for (int i = 0; i < 2; ++i) {
      nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
      for (int j = 0; j < 511; ++j) ids.push_back(3 + (i * 13 + j * 7) % 32000);
      ids.push_back(1);
      for (int j = 0; j < 127; ++j) labels.push_back(3 + (i * 11 + j * 5) % 32000);
      labels.push_back(1);
      out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
    }
  }
  const std::string model = " --config_name '" + (source_dir() / "configs" / "flan-t5-xl").string() +
                            "' --max_source_length 512 --max_target_length 128 --max_memory 16GiB --device cpu ";
  auto r = run_command(fitsum_binary().string() + " plan" + model +
                       "--per_device_train_batch_size 1 --gradient_accumulation_steps 32");
  ASSERT_EQ(r.exit_code, 3) << r.output;
  std::smatch m;
  static const std::regex sentence(R"(; (--lora_r [^;]*?) fits in ([0-9.]+ [KMGT]iB) \(predicted peak, with ([^)]*)\))");
  ASSERT_TRUE(std::regex_search(r.output, m, sentence)) << r.output;
  const std::string plan_flags = m[3].str();
  // The suggested plan's micro-batch, trained once: replace its accumulation by 1.
  const auto one_step = std::regex_replace(plan_flags, std::regex("--gradient_accumulation_steps [0-9]+"),
                                           "--gradient_accumulation_steps 1");
  r = run_command(fitsum_binary().string() + " train" + model + one_step + " --no_resplit --train_file '" +
                  (dir / "train.jsonl").string() + "' --output_dir '" + (dir / "out").string() +
                  "' --max_steps 1 --logging_steps 1 --save_strategy no");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto state = util::read_json_file(dir / "out" / "trainer_state.json");
  for (const auto& e : state["log_history"]) {
    if (!e.contains("peak_memory_bytes")) continue;
    const auto peak = e["peak_memory_bytes"].get<double>();
    EXPECT_LE(peak, 16.0 * 1024 * 1024 * 1024) << e.dump();
    EXPECT_GE(e["predicted_peak_bytes"].get<double>(), peak * 0.95) << e.dump();
    EXPECT_LE(e["predicted_peak_bytes"].get<double>(), peak * 1.10) << e.dump();
  }
}

}  // namespace
}  // namespace fitsum::test
