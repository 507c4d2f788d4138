// What the command line says about CUDA on a machine without a GPU: `--device cuda` fails in one line naming why,
// `fitsum plan --cuda_alloc_conf` reports the CUDA allocator model's terms for the plan (docs/memory.md, "On
// CUDA") and refuses a configuration the allocator would refuse.
#include <algorithm>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include "fitsum/util/runtime.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string plan_command(const fs::path& dir, const std::string& extra) {
  std::ofstream out(dir / "train.jsonl");
  for (int i = 0; i < 8; ++i) {
    nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
    for (int j = 0; j < 31; ++j) ids.push_back(103 + (i * 13 + j * 7) % 500);
    ids.push_back(1);
    for (int j = 0; j < 7; ++j) labels.push_back(103 + (i * 11 + j * 5) % 500);
    labels.push_back(1);
    out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
  }
  return "(" + fitsum_binary().string() + " plan --device cpu --config_name '" +
         (source_dir() / "configs" / "pegasus-tiny" / "config.json").string() +
         "' --config_overrides vocab_size=8000 --train_file '" + (dir / "train.jsonl").string() +
         "' --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --no_resplit --optim adafactor"
         " --gradient_checkpointing --max_memory 2GiB --format json " +
         extra + " 2>'" + (dir / "stderr.txt").string() + "')";
}

TEST(CudaCli, DeviceCudaWithoutAGpuFailsInOneLineNamingWhy) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible";
  const auto r = run_command(fitsum_binary().string() + " info --model '" +
                             (source_dir() / "data" / "pegasus").string() + "' --device cuda 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_EQ(r.output.rfind("fitsum: error: device cuda: ", 0), 0u) << r.output;
  const std::string reason = util::built_with_cuda() ? "no CUDA device is visible" : "CPU-only LibTorch";
  EXPECT_NE(r.output.find(reason), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("use device cpu"), std::string::npos) << r.output;  // the hint
}

TEST(CudaCli, PlanReportsTheCudaTermsOfTheAllocatorModel) {
  const auto dir = temp_dir("plan-cuda-terms");
  const auto r = run_command(plan_command(dir, "--cuda_alloc_conf expandable_segments:True"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_TRUE(j["cuda_alloc_conf"]["expandable_segments"].get<bool>());
  EXPECT_EQ(j["budget_caps"], "peak");  // on the CPU the terms are reported; the budget caps what the CPU holds
  EXPECT_EQ(j["cuda_alloc_conf"]["text"], "expandable_segments:True");
  const auto& chosen = j["chosen"];
  ASSERT_TRUE(chosen.is_object()) << r.output;
  const auto& cuda = chosen["breakdown"]["cuda"];
  const auto term = [&](const char* name) { return cuda.at(name).get<double>(); };
  // The replayed tensors are the planner's: what they ask for is its predicted peak plus cuBLAS's workspace
  // (32 MiB: the CPU plans for an H100 / H200).
  EXPECT_EQ(term("cublas_workspace"), 32 * kMiB);
  EXPECT_EQ(term("requested"), chosen["predicted_peak_bytes"].get<double>() + term("cublas_workspace"));
  EXPECT_EQ(term("allocated"), term("requested") + term("block_rounding"));
  EXPECT_EQ(term("reserved"), term("allocated") + term("small_pool_slack") + term("large_segment_slack"));
  // Every tensor is live at the peak: expandable segments leave at most one unfilled page per pool.
  EXPECT_LT(term("small_pool_slack"), 2 * kMiB);
  EXPECT_LT(term("large_segment_slack"), 20 * kMiB);
  EXPECT_EQ(term("device_total"), term("reserved") + term("cuda_context"));
  EXPECT_EQ(j["candidates"][0]["breakdown"]["cuda"], cuda);
}

// The probe's own peaks, allocated and reserved, beside the prediction: on the CPU, whose allocator caches nothing,
// reserved equals allocated (on CUDA they are max_memory_allocated and max_memory_reserved).
TEST(CudaCli, PlanReportsTheProbesReservedPeaksBesideAllocated) {
  const auto dir = temp_dir("plan-probe-peaks");
  const auto r = run_command(plan_command(dir, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_TRUE(j.contains("probe")) << r.output;
  const auto& probe = j["probe"];
  EXPECT_GT(probe["peak_allocated_bytes"].get<double>(), 0.0);
  EXPECT_EQ(probe["peak_reserved_bytes"], probe["peak_allocated_bytes"]);
  ASSERT_GE(probe["samples"].size(), 29u);  // 7 shapes x 2 modes (1 + 1) and 5 x 3 (2 + 2)
  double largest = 0.0;
  for (const auto& s : probe["samples"]) {
    EXPECT_GT(s["peak_allocated_bytes"].get<double>(), 0.0) << s;
    EXPECT_EQ(s["peak_reserved_bytes"], s["peak_allocated_bytes"]) << s;
    largest = std::max(largest, s["peak_allocated_bytes"].get<double>());
  }
  EXPECT_EQ(probe["peak_allocated_bytes"].get<double>(), largest);
  for (const char* optimizer : {"adamw_torch", "adafactor"}) {
    EXPECT_GT(probe["optimizer_peak_reserved_bytes"][optimizer].get<double>(), 0.0) << optimizer;
  }
}

TEST(CudaCli, PlanReadsPytorchCudaAllocConfFromTheEnvironment) {
  const auto dir = temp_dir("plan-cuda-env");
  const auto r = run_command("(export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64; " + plan_command(dir, "") + ")");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["cuda_alloc_conf"]["text"], "max_split_size_mb:64");
  EXPECT_EQ(j["cuda_alloc_conf"]["max_split_size_bytes"].get<double>(), 64 * kMiB);
  EXPECT_TRUE(j["chosen"]["breakdown"].contains("cuda"));
  const auto bad = run_command("(export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:8; " + plan_command(dir, "") + ")");
  EXPECT_EQ(bad.exit_code, 2);
  std::ifstream err(dir / "stderr.txt");
  const std::string message((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_NE(message.find("PYTORCH_CUDA_ALLOC_CONF 'max_split_size_mb:8'"), std::string::npos) << message;
}

TEST(CudaCli, PlanOnTheCpuWithoutCudaAllocConfHasNoCudaTerms) {
  const auto dir = temp_dir("plan-no-cuda-terms");
  const auto r = run_command(plan_command(dir, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_FALSE(j.contains("cuda_alloc_conf"));
  EXPECT_FALSE(j["chosen"]["breakdown"].contains("cuda"));
}

TEST(CudaCli, AnAllocatorConfigurationTheAllocatorRefusesFailsInOneLine) {
  const auto dir = temp_dir("plan-bad-alloc-conf");
  const auto r = run_command(plan_command(dir, "--cuda_alloc_conf max_split_size_mb:8"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  std::ifstream err(dir / "stderr.txt");
  const std::string message((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 1) << message;
  EXPECT_NE(message.find("--cuda_alloc_conf 'max_split_size_mb:8': max_split_size_mb must be above 20"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace fitsum::test
