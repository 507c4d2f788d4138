// bench/gpu.sh is what runs when a GPU is lent (rarely, for minutes): its plan of stages and its summary are checked
// here, without a GPU, so that a lent run is never spent on a script error.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace fitsum::test {
namespace {

// The command lines of the dry run ("+ ..."), in order.
std::vector<std::string> dry_run_commands() {
  const auto result = run_command("cd '" + source_dir().string() + "' && bash bench/gpu.sh --dry-run");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  std::vector<std::string> commands;
  std::istringstream lines(result.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("+ ", 0) == 0) commands.push_back(line);
  }
  return commands;
}

std::size_t index_of(const std::vector<std::string>& commands, const std::string& log) {
  for (std::size_t i = 0; i < commands.size(); ++i) {
    if (commands[i].find("> " + log) != std::string::npos) return i;
  }
  ADD_FAILURE() << "no stage writes " << log;
  return commands.size();
}

TEST(GpuScript, DryRunPlansEveryMeasurementTheIssueNeedsMostNeededFirst) {
  const auto commands = dry_run_commands();
  // The measured runs before the data-parallel check and the HF side by side, which a short clock skips first.
  const std::vector<std::string> order = {"plan.json",          "fitsum-seed.json",   "fitsum-planned.json",
                                          "plan-card.json",     "fitsum-card.json",   "fitsum-offload.json",
                                          "fitsum-80g.json",    "fitsum-cell-a.json", "fitsum-cell-b.json",
                                          "data_parallel.log",  "hf-seed.json",       "hf-planned.json"};
  for (std::size_t i = 1; i < order.size(); ++i) {
    EXPECT_LT(index_of(commands, order[i - 1]), index_of(commands, order[i])) << order[i - 1] << " / " << order[i];
  }
  const auto& card = commands[index_of(commands, "fitsum-card.json")];
  EXPECT_NE(card.find("--max_memory 7.79GiB"), std::string::npos) << card;
  EXPECT_NE(card.find("--plan"), std::string::npos) << card;
  const auto& offload = commands[index_of(commands, "fitsum-offload.json")];
  EXPECT_NE(offload.find("--offload_optimizer cpu"), std::string::npos) << offload;
  EXPECT_NE(offload.find("--optim adamw_torch"), std::string::npos) << offload;
  EXPECT_NE(offload.find("--max_memory 7.79GiB"), std::string::npos) << offload;
  EXPECT_NE(commands[index_of(commands, "fitsum-80g.json")].find("--max_memory 80GiB"), std::string::npos);
}

TEST(GpuScript, SummaryHoldsEachPredictionToItsBoundsAndReportsMfu) {
  const auto work = temp_dir("gpu_summary");
  std::ofstream(work / "machine.txt") << "NVIDIA H200, 143771 MiB, 580.65\n";
  std::ofstream(work / "stages.tsv") << "build\tok\t90\n";
  // 8 TFLOP per step, of which 2 recomputed, in 2 s on a 989.4 TFLOP/s device: 10e12 / 2 / 989.4e12 = 0.505%.
  std::ofstream(work / "fitsum-card.json")
      << R"({"impl":"fitsum","step_s_median":2.0,"flops_per_step":8e12,"recompute_flops_per_step":2e12,)"
      << R"("peak_allocated_mib":1000,"predicted_allocated_mib":1095,"peak_reserved_mib":1000,)"
      << R"("predicted_reserved_mib":940})" << "\n";
  const auto result = run_command("python3 '" + (source_dir() / "bench/gpu_summary.py").string() + "' '" +
                                  work.string() + "' '" + (work / "results.json").string() + "'");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream in(work / "results.json");
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["predictions"].size(), 1u) << j.dump();
  const auto& card = j["predictions"][0];
  EXPECT_EQ(card["config"], "card");
  EXPECT_DOUBLE_EQ(card["allocated"]["error_percent"].get<double>(), 9.5);
  EXPECT_TRUE(card["allocated"]["holds"].get<bool>());  // 9.5% over: within 10%
  EXPECT_DOUBLE_EQ(card["reserved"]["error_percent"].get<double>(), -6.0);
  EXPECT_FALSE(card["reserved"]["holds"].get<bool>());  // 6% under: more than 5% under
  EXPECT_DOUBLE_EQ(card["mfu_percent"].get<double>(), 0.5);
  EXPECT_NE(result.output.find("OUT OF BOUNDS"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace fitsum::test
