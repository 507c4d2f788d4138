// `fitsum plan`, then `fitsum train` with the same flags and --max_memory, for pegasus-x-large's config
// (configs/pegasus-x-large) at 16384 source and 256 summary tokens: the plan is chosen, fits the budget with the
// planner's margin, and two optimizer steps trained with it peak under the budget and within 10% of the prediction.
// Shared by the reduced copy (tests/integration/plan_long_input_test.cpp) and the slow label's full
// depth (tests/slow/plan_long_input_slow_test.cpp).
#pragma once

#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {

struct LongInputRun {
  std::string overrides;  // --config_overrides (empty: the full model)
  double budget_mib = 8192;
  std::int64_t source = 16384;
  std::int64_t target = 256;
  std::int64_t examples = 4;
};

// `count` pre-tokenized records of exactly `source` and `target` tokens, eos last.
inline fs::path write_long_records(const fs::path& dir, const LongInputRun& run) {
  std::ofstream out(dir / "train.jsonl");
  for (std::int64_t i = 0; i < run.examples; ++i) {
    nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
    for (std::int64_t j = 0; j + 1 < run.source; ++j) ids.push_back(103 + (i * 13 + j * 7) % 5000);
    ids.push_back(1);
    for (std::int64_t j = 0; j + 1 < run.target; ++j) labels.push_back(103 + (i * 11 + j * 5) % 5000);
    labels.push_back(1);
    out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
  }
  return dir / "train.jsonl";
}

// Plans, checks the plan, trains two steps with it; returns the chosen candidate of `fitsum plan --format json`.
inline nlohmann::json plan_and_train_long_input(const fs::path& dir, const LongInputRun& run) {
  const auto data = write_long_records(dir, run);
  const double budget = run.budget_mib * 1024.0 * 1024.0;
  const std::string args =
      " --config_name '" + (source_dir() / "configs" / "pegasus-x-large" / "config.json").string() + "'" +
      (run.overrides.empty() ? std::string() : " --config_overrides " + run.overrides) + " --train_file '" +
      data.string() + "' --max_source_length " + std::to_string(run.source) + " --max_target_length " +
      std::to_string(run.target) + " --per_device_train_batch_size 2 --max_memory " +
      std::to_string(static_cast<long long>(run.budget_mib)) + "MiB --device cpu ";
  auto r = run_command("(" + fitsum_binary().string() + " plan" + args + "--format json 2>/dev/null)");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (r.exit_code != 0) return nullptr;
  const auto plan = nlohmann::json::parse(r.output);
  const auto chosen = plan["chosen"];
  EXPECT_TRUE(chosen.is_object()) << r.output.substr(0, 2000);
  if (!chosen.is_object()) return nullptr;
  EXPECT_LE(chosen["predicted_peak_bytes"].get<double>() * 1.05, budget) << chosen.dump();

  r = run_command(fitsum_binary().string() + " train" + args + "--output_dir '" + (dir / "out").string() +
                  "' --max_steps 2 --logging_steps 1 --save_strategy no");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("memory plan: chose"), std::string::npos) << r.output;
  const auto state = util::read_json_file(dir / "out" / "trainer_state.json");
  int entries = 0;
  for (const auto& e : state["log_history"]) {
    if (!e.contains("peak_memory_bytes")) continue;
    ++entries;
    const auto peak = e["peak_memory_bytes"].get<double>();
    EXPECT_LE(peak, budget) << e.dump();
    EXPECT_LE(peak, e["predicted_peak_bytes"].get<double>() * 1.10) << e.dump();
    std::printf("step %d: measured peak %.1f MiB, predicted %.1f MiB, budget %.0f MiB\n", entries, peak / 1048576.0,
                e["predicted_peak_bytes"].get<double>() / 1048576.0, run.budget_mib);
  }
  EXPECT_EQ(entries, 2);
  const auto saved = util::read_json_file(dir / "out" / "training_args.json");
  EXPECT_EQ(saved["per_device_train_batch_size"], chosen["per_device_train_batch_size"]);
  EXPECT_EQ(saved["optim"], chosen["optim"]);
  return chosen;
}

}  // namespace fitsum::test
