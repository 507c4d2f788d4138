// What `fitsum plan` shows besides its table: the memory report's picture when some candidates need many times the
// budget (cut at the axis' top so that the ones that fit stay readable, their values written), and a plan for a CUDA
// device made on a machine without one (the CUDA terms printed, the speeds said to be this CPU's).
#include <fstream>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/bytes.h"
#include "fitsum/util/files.h"
#include "fitsum/util/runtime.h"
#include "svg_check.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string plan_command(const fs::path& data) {
  return fitsum_binary().string() + " plan --model_name_or_path '" +
         (source_dir() / "tests" / "data" / "fixtures" / "tiny-t5").string() + "' --train_file '" + data.string() +
         "' --source_prefix 'summarize: ' --per_device_train_batch_size 16 ";
}

// Sixteen records of 60 source and 12 summary tokens (ids of the tiny T5's vocabulary).
fs::path write_records(const fs::path& dir) {
  std::ofstream out(dir / "train.jsonl");
  for (int i = 0; i < 16; ++i) {
    nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
    for (int j = 0; j < 59; ++j) ids.push_back(3 + (i * 13 + j * 7) % 400);
    ids.push_back(1);
    for (int j = 0; j < 11; ++j) labels.push_back(3 + (i * 11 + j * 5) % 400);
    labels.push_back(1);
    out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
  }
  return dir / "train.jsonl";
}

// A candidate's bar as the report stacks it: weights, gradients, optimizer state and the larger transient.
double stacked(const nlohmann::json& candidate) {
  const auto& b = candidate["breakdown"];
  return b["weights"].get<double>() + b["gradients"].get<double>() + b["optimizer_state"].get<double>() +
         std::max(b["activations"].get<double>(), b["optimizer_step_transient"].get<double>());
}

double attribute(const std::string& element, const std::string& name) {
  std::smatch match;
  const std::regex pattern(" " + name + "=\"([-0-9.e]+)\"");
  return std::regex_search(element, match, pattern) ? std::stod(match[1].str()) : -1.0;
}

TEST(PlanReport, BarsFarPastTheBudgetAreCutSoTheFittingOnesStayReadable) {
  const auto dir = temp_dir("plan-report-cut");
  const auto data = write_records(dir);
  // The candidates' sizes first, then a budget a third of the largest: several bars are far past it.
  auto r = run_command("(" + plan_command(data) + "--max_memory 1GiB --format json 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  double largest = 0, smallest = 1e300;
  const auto sizes = nlohmann::json::parse(r.output);
  for (const auto& c : sizes["candidates"]) {
    largest = std::max(largest, stacked(c));
    smallest = std::min(smallest, stacked(c));
  }
  ASSERT_GT(largest, 3 * smallest) << "the plan's candidates are too alike to test cutting";
  const auto budget = static_cast<std::uint64_t>(largest / 3);
  const auto report = dir / "report.svg";
  r = run_command("(" + plan_command(data) + "--max_memory " + std::to_string(budget) +
                  " --format json --memory_report '" + report.string() + "' 2>/dev/null)");
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.output;  // 3: nothing fits, the report is written anyway
  const auto plan = nlohmann::json::parse(r.output);
  const auto svg = util::read_file(report);

  // The plot's frame and the budget line: the budget stands at least 40% of the way up (uncut, a third).
  std::smatch match;
  ASSERT_TRUE(std::regex_search(svg, match, std::regex("<rect [^>]*fill=\"none\" stroke=\"black\"/>"))) << svg;
  const double frame_top = attribute(match[0].str(), "y"), frame_height = attribute(match[0].str(), "height");
  ASSERT_TRUE(std::regex_search(svg, match, std::regex("<line [^>]*stroke-dasharray=\"4 3\"/>"))) << svg;
  const double budget_y = attribute(match[0].str(), "y1");
  EXPECT_GE(frame_top + frame_height - budget_y, 0.4 * frame_height) << "budget at y " << budget_y;
  // No bar reaches above the frame; each one past 2.5x the budget (past any axis top) has its value written.
  const std::regex bar("<rect x=\"[-0-9.e]+\" y=\"([-0-9.e]+)\" width=\"26\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), bar); it != std::sregex_iterator(); ++it) {
    EXPECT_GE(std::stod((*it)[1].str()), frame_top - 0.01) << (*it)[0].str();
  }
  int cut = 0;
  for (const auto& c : plan["candidates"]) {
    if (stacked(c) <= 2.5 * static_cast<double>(budget)) continue;
    ++cut;
    const auto value = ">" + util::format_bytes(static_cast<std::uint64_t>(stacked(c))) + "</text>";
    EXPECT_TRUE(contains(svg, value)) << value;
  }
  EXPECT_GT(cut, 0);
  // The legend says what "(no)", the outline and a cut bar mean.
  EXPECT_TRUE(contains(svg, ">(no)</text>") && contains(svg, ">does not fit the budget</text>")) << svg;
  EXPECT_TRUE(contains(svg, ">chosen</text>")) << svg;
  EXPECT_TRUE(contains(svg, "taller than the axis")) << svg;
  const auto outside = svg_texts_outside_image(svg);
  EXPECT_TRUE(outside.empty()) << outside.front();
  const auto why_not = render_svg_to_png(report, dir / "report.png");
  if (!why_not.empty()) GTEST_SKIP() << why_not;
  EXPECT_GT(png_size(dir / "report.png").first, 600);
}

TEST(PlanForCuda, WithoutAGpuPlansForOneAndSaysTheSpeedsAreThisCpus) {
  const auto dir = temp_dir("plan-for-cuda");
  const auto data = write_records(dir);
  if (util::cuda_visible()) GTEST_SKIP() << "a CUDA device is visible: the plan is the device's own";
  auto r = run_command(plan_command(data) + "--device cuda --max_memory 24GB");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "planning for one (an H100 / H200) with the probe on this machine's CPU")) << r.output;
  EXPECT_TRUE(contains(r.output, "budget 22.35 GiB (caps CUDA's reserved bytes)")) << r.output;
  EXPECT_TRUE(contains(r.output, "CUDA (chosen): allocated ")) << r.output;
  EXPECT_TRUE(contains(r.output, ", with the CUDA context ")) << r.output;
  EXPECT_TRUE(contains(r.output, "speeds (tokens/s, step s) are this machine's CPU's")) << r.output;
  r = run_command("(" + plan_command(data) + "--device cuda --max_memory 80GB --format json 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto plan = nlohmann::json::parse(r.output);
  EXPECT_EQ(plan["planned_for"], "cuda");
  EXPECT_EQ(plan["budget_caps"], "reserved");
  for (const auto& c : plan["candidates"]) EXPECT_TRUE(c["breakdown"].contains("cuda")) << c.dump();
  // Allocator settings on the CPU plan the memory for CUDA too; the speeds are still this machine's.
  r = run_command(plan_command(data) + "--device cpu --cuda_alloc_conf expandable_segments:True --max_memory 1GiB");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "CUDA (chosen): allocated ")) << r.output;
  EXPECT_TRUE(contains(r.output, "speeds (tokens/s, step s) are this machine's CPU's")) << r.output;
  // A plan for the CPU says nothing of CUDA.
  r = run_command(plan_command(data) + "--device cpu --max_memory 1GiB");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "CUDA")) << r.output;
}

TEST(PlanForCuda, WithoutAGpuTheBudgetMustBeGiven) {
  const auto dir = temp_dir("plan-for-cuda-auto");
  const auto data = write_records(dir);
  if (util::cuda_visible()) GTEST_SKIP() << "a CUDA device is visible: max_memory auto reads its free memory";
  const auto r = run_command(plan_command(data) + "--device cuda");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "fitsum: error: device cuda: this machine has no CUDA device")) << r.output;
  EXPECT_TRUE(contains(r.output, "--max_memory SIZE")) << r.output;
}

}  // namespace
}  // namespace fitsum::test
