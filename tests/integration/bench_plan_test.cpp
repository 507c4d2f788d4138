// `fitsum bench train --max_memory`: the budget goes through the planner path of `fitsum train --max_memory`
// (train/memory_plan.h): the settings given are kept and checked (predicted peak in the JSON), --plan lets the
// planner choose, and a budget nothing fits ends with status 3 and the planner's reason.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace fitsum::test {
namespace {

const std::string kBench = " bench train --shape tiny --src_len 16 --tgt_len 8 --steps 1 --warmup 0 ";

nlohmann::json last_json_line(const std::string& output) {
  const auto start = output.rfind("\n{");
  return nlohmann::json::parse(output.substr(start == std::string::npos ? 0 : start + 1));
}

TEST(BenchPlan, AGivenConfigurationIsCheckedAgainstTheBudgetAndKept) {
  const auto run = run_command(fitsum_binary().string() + kBench +
                               "--batch 2 --gradient_accumulation_steps 2 --optim adafactor --max_memory 4GiB 2>&1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("fitsum: memory plan: "), std::string::npos) << run.output;
  const auto out = last_json_line(run.output);
  EXPECT_EQ(out["batch"], 2);
  EXPECT_EQ(out["gradient_accumulation_steps"], 2);
  EXPECT_EQ(out["optim"], "adafactor");
  EXPECT_EQ(out["gradient_checkpointing"], false);
  ASSERT_TRUE(out.contains("predicted_peak_mib")) << run.output;
  EXPECT_GT(out["predicted_peak_mib"].get<double>(), 0.0);
  EXPECT_LT(out["predicted_peak_mib"].get<double>(), 4096.0);
}

TEST(BenchPlan, PlanKeepsTheEffectiveBatchAndABudgetNothingFitsIsStatusThree) {
  const auto planned = run_command(fitsum_binary().string() + kBench +
                                   "--batch 2 --gradient_accumulation_steps 2 --plan --max_memory 4GiB 2>&1");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const auto out = last_json_line(planned.output);
  EXPECT_EQ(out["batch"].get<int>() * out["gradient_accumulation_steps"].get<int>(), 4) << planned.output;

  const auto refused = run_command(fitsum_binary().string() + kBench + "--batch 2 --max_memory 1MiB 2>&1");
  EXPECT_EQ(refused.exit_code, 3) << refused.output;
  EXPECT_NE(refused.output.find("max_memory 1.00 MiB is too small for optim adafactor"), std::string::npos)
      << refused.output;
}

}  // namespace
}  // namespace fitsum::test
