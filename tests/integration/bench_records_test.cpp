// What `fitsum bench train` records for a GPU run and `fitsum bench allocator`, which replays an allocator history
// through fitsum's allocator model (tools/fitsum/bench_records.cpp): the replay as a user runs it on the synthetic
// records of tests/data/allocator, its errors, the record flags refused off CUDA, and bench/gpu.sh --dry-run
// passing them for each measured fitsum run.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

std::string fitsum() { return fitsum_binary().string(); }
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
std::string record(const std::string& name) { return (source_dir() / "tests/data/allocator" / name).string(); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(BenchRecords, TheReplayNamesWhereTheModelAndTheAllocatorPartWays) {
  const auto r = run_command(fitsum() + " bench allocator '" + record("diverges.json") + "' 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "first divergence at entry 9, alloc of 12000000 bytes (entry 10): the allocator did "
                                 "segment_alloc 12582912; the model did no segment action"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "peak reserved:  recorded 46.00 MiB (48234496), model 34.00 MiB (35651584)")) << r.output;
  EXPECT_EQ(lines_of(r.output).back(), "verdict: the model and the allocator part ways at entry 9 (1 of 6 requests "
                                       "differ)");
  const auto agrees = run_command(fitsum() + " bench allocator '" + record("agrees.json") + "' 2>&1");
  ASSERT_EQ(agrees.exit_code, 0) << agrees.output;
  EXPECT_EQ(lines_of(agrees.output).back(), "verdict: the model agrees with the allocator on every segment action (6)");
}

TEST(BenchRecords, ABadRecordIsAOneLineError) {
  const auto dir = temp_dir("bench-records-bad");
  auto j = nlohmann::json::parse(util::read_file(record("agrees.json")));
  j["device_traces"][0][2].erase("action");
  write_bytes(dir / "no_action.json", j.dump());
  write_bytes(dir / "text.json.gz", "plain text, not gzip, not JSON");
  for (const auto& [file, says] : {std::pair{dir / "no_action.json", std::string("device_traces[0][2].action is missing")},
                                   std::pair{dir / "text.json.gz", std::string("text.json.gz")},
                                   std::pair{dir / "absent.json.gz", std::string("absent.json.gz")}}) {
    const auto r = run_command(fitsum() + " bench allocator '" + file.string() + "' 2>&1");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    ASSERT_EQ(lines_of(r.output).size(), 1u) << r.output;
    EXPECT_TRUE(contains(r.output, "fitsum: error: ")) << r.output;
    EXPECT_TRUE(contains(r.output, says)) << r.output;
    EXPECT_TRUE(contains(r.output, file.string())) << r.output;
  }
}

TEST(BenchRecords, TheRecordsNeedCuda) {
  const auto dir = temp_dir("bench-records-cpu");
  const std::string train = " bench train --shape tiny --batch 1 --src_len 8 --tgt_len 4 --steps 1 --warmup 0 ";
  for (const auto& [flags, says] :
       {std::pair{"--record_allocator '" + (dir / "a.json.gz").string() + "'",
                  std::string("--record_allocator needs --device cuda")},
        std::pair{"--record_profile '" + (dir / "p.json.gz").string() + "'", std::string("--record_profile needs --device cuda")}}) {
    const auto r = run_command(fitsum() + train + flags + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    ASSERT_EQ(lines_of(r.output).size(), 1u) << r.output;
    EXPECT_TRUE(contains(r.output, "fitsum: error: " + says)) << r.output;
  }
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(BenchRecords, GpuShDryRunPassesTheRecordsForEachMeasuredRun) {
  const auto dir = temp_dir("bench-records-dry-run");
  const auto r = run_command("cd '" + source_dir().string() + "' && TMPDIR='" + dir.string() +
                             "' timeout 60 bash bench/gpu.sh --dry-run 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto out = (dir / "fitsum-gpu-dry-run").string();
  for (const std::string name : {"seed", "planned"}) {
    std::string run;
    for (const auto& line : lines_of(r.output)) {
      if (contains(line, "bench train") && contains(line, "> fitsum-" + name + ".json")) run = line;
    }
    EXPECT_TRUE(contains(run, "--record_allocator " + out + "/allocator-" + name + ".json.gz")) << r.output;
    EXPECT_TRUE(contains(run, "--record_profile " + out + "/profile-" + name + ".json.gz")) << r.output;
    EXPECT_TRUE(contains(r.output, "bench allocator " + out + "/allocator-" + name + ".json.gz > replay-" + name))
        << r.output;
  }
  EXPECT_TRUE(contains(r.output, "--record_allocator_entries 300000")) << r.output;
}

}  // namespace
}  // namespace fitsum::test
