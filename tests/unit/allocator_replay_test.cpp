// fitsum's CUDA allocator model replayed against a recorded allocator history (memory/allocator_replay.h): synthetic
// records in the format `fitsum bench train --record_allocator` writes (tests/data/allocator/, README.md there),
// one the model follows and one where the recorded allocator took a segment the model does not; bad records.
#include <gtest/gtest.h>

#include <fstream>

#include "fitsum/memory/allocator_replay.h"
#include "fitsum/util/files.h"
#include "fitsum/util/gzip_file.h"
#include "test_support.h"

namespace fitsum::memory {
namespace {

namespace fs = std::filesystem;
constexpr std::uint64_t MiB = 1024 * 1024;

fs::path record_file(const std::string& name) { return test::source_dir() / "tests/data/allocator" / name; }

TEST(AllocatorReplay, TheModelFollowsARecordOfSmallAndLargeAllocations) {
  const auto record = read_allocator_record(record_file("agrees.json"));
  ASSERT_EQ(record.trace.size(), 24u);
  const auto report = replay_allocator_record(record);
  EXPECT_FALSE(report.first_divergence.has_value()) << describe_replay(record, report);
  EXPECT_EQ(report.allocations, 6u);
  EXPECT_EQ(report.frees, 6u);
  EXPECT_EQ(report.recorded_segment_actions, 6u);  // three segment_alloc, three segment_free (empty_cache)
  EXPECT_EQ(report.model_segment_actions, 6u);
  EXPECT_EQ(report.recorded_peak_reserved, 34 * MiB);  // 2 MiB small, 20 MiB large, 12 MiB of its own
  EXPECT_EQ(report.model_peak_reserved, 34 * MiB);
  EXPECT_EQ(report.model_end_reserved, 0u);
  EXPECT_EQ(report.recorded_end_reserved, 0u);
  // Blocks: 1024 + 4096 (small) + 9 MiB + 12 MiB (the whole segment: its rest is under 1 MiB, not split) + 5 MiB.
  EXPECT_EQ(report.model_peak_allocated, 1024 + 4096 + 26 * MiB);
  EXPECT_NE(describe_replay(record, report).find("verdict: the model agrees with the allocator on every segment "
                                                 "action (6)"),
            std::string::npos);
}

TEST(AllocatorReplay, NamesTheEntryWhereTheAllocatorTookASegmentTheModelDidNot) {
  const auto record = read_allocator_record(record_file("diverges.json"));
  EXPECT_EQ(record.snapshot_segments, 4);
  EXPECT_EQ(record.snapshot_reserved, 46 * MiB);
  const auto report = replay_allocator_record(record);
  ASSERT_TRUE(report.first_divergence.has_value());
  EXPECT_EQ(report.first_divergence->index, 9u);  // the recorded segment_alloc before the alloc of entry 10
  EXPECT_EQ(report.first_divergence->request, "alloc of 12000000 bytes (entry 10)");
  EXPECT_EQ(report.first_divergence->recorded, "segment_alloc 12582912");
  EXPECT_EQ(report.first_divergence->modelled, "no segment action");  // it reuses the cached 12 MiB block
  EXPECT_EQ(report.divergent_requests, 1u);
  EXPECT_EQ(report.recorded_peak_reserved, 46 * MiB);
  EXPECT_EQ(report.model_peak_reserved, 34 * MiB);
  const auto text = describe_replay(record, report);
  EXPECT_NE(text.find("verdict: the model and the allocator part ways at entry 9 (1 of 6 requests differ)"),
            std::string::npos)
      << text;
}

// Segments given back just before an allocation are an empty_cache() there when no limit made the allocator retry:
// the model empties its cache too, and the new segment the allocation then takes matches.
TEST(AllocatorReplay, AnEmptyCacheJustBeforeAnAllocationIsReplayedAsOne) {
  auto j = nlohmann::json::parse(util::read_file(record_file("diverges.json")));
  auto& trace = j["device_traces"][0];
  const auto entry = [](const char* action, std::uint64_t addr, std::uint64_t size) {
    return nlohmann::json{{"action", action}, {"addr", addr}, {"size", size}, {"stream", 0}, {"time_us", 0}};
  };
  const auto cached = trace[5]["addr"].get<std::uint64_t>();
  const auto fresh = trace[9]["addr"].get<std::uint64_t>();
  trace.erase(trace.begin() + 9, trace.end());  // after the free of the 12 MiB block
  trace.push_back(entry("segment_free", cached, 12 * MiB));
  trace.push_back(entry("segment_alloc", fresh, 12 * MiB));
  trace.push_back(entry("alloc", fresh, 12000000));
  const auto record = parse_allocator_record(j, "empty_cache.json");
  const auto report = replay_allocator_record(record);
  EXPECT_FALSE(report.first_divergence.has_value()) << describe_replay(record, report);
  EXPECT_EQ(report.model_segment_actions, 5u);
  EXPECT_EQ(report.model_end_reserved, 34 * MiB);
  EXPECT_EQ(report.recorded_end_reserved, 34 * MiB);
}

TEST(AllocatorReplay, ReadsAGzipRecord) {
  const auto dir = test::temp_dir("allocator_replay_gzip");
  const auto file = dir / "record.json.gz";
  util::write_gzip_file(file, util::read_file(record_file("diverges.json")));
  std::ifstream in(file, std::ios::binary);
  EXPECT_EQ(in.get(), 0x1f);  // gzip's magic
  const auto report = replay_allocator_record(read_allocator_record(file));
  ASSERT_TRUE(report.first_divergence.has_value());
  EXPECT_EQ(report.first_divergence->index, 9u);
  EXPECT_FALSE(fs::exists(dir / "record.json.gz.partial"));
}

TEST(AllocatorReplay, ABadRecordIsOneLineNamingTheFileAndTheField) {
  const auto dir = test::temp_dir("allocator_replay_bad");
  const auto error = [](const fs::path& file) {
    return test::error_of<std::runtime_error>([&] { replay_allocator_record(read_allocator_record(file)); });
  };
  EXPECT_NE(error(dir / "missing.json.gz").find("missing.json.gz"), std::string::npos);
  test::write_bytes(dir / "text.json", "not json\n");
  EXPECT_NE(error(dir / "text.json").find("text.json"), std::string::npos);
  const auto edited = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    auto j = nlohmann::json::parse(util::read_file(record_file("diverges.json")));
    edit(j);
    test::write_bytes(dir / name, j.dump());
    const auto message = error(dir / name);
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find((dir / name).string()), std::string::npos) << message;
    return message;
  };
  EXPECT_NE(edited("no_size.json", [](auto& j) { j["device_traces"][0][3].erase("size"); })
                .find("device_traces[0][3].size is missing"),
            std::string::npos);
  EXPECT_NE(edited("negative.json", [](auto& j) { j["device_traces"][0][4]["addr"] = -1; })
                .find("device_traces[0][4].addr is not a count"),
            std::string::npos);
  EXPECT_NE(edited("no_settings.json", [](auto& j) { j.erase("allocator_settings"); }).find("allocator_settings is missing"),
            std::string::npos);
  EXPECT_NE(edited("bad_conf.json", [](auto& j) { j["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"] = "nonsense:1"; })
                .find("PYTORCH_CUDA_ALLOC_CONF"),
            std::string::npos);
  EXPECT_NE(edited("segments.json", [](auto& j) { j["segments"][1].erase("total_size"); })
                .find("segments[1].total_size is missing"),
            std::string::npos);
  EXPECT_NE(edited("wrapped.json", [](auto& j) { j["fitsum"]["trace_complete"] = false; }).find("overflowed"),
            std::string::npos);
  // A free of an address the trace never allocated: the trace misses its start.
  EXPECT_NE(edited("headless.json", [](auto& j) { j["device_traces"][0].erase(j["device_traces"][0].begin(), j["device_traces"][0].begin() + 7); })
                .find("entry 1 frees address"),
            std::string::npos);
}

}  // namespace
}  // namespace fitsum::memory
