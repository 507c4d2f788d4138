// What a name resolves to before anything is read: regular files (also through symbolic links laid out like Hugging
// Face's cache) are read; FIFOs, devices, folders, missing files and link loops are refused by name, at once,
// without blocking. Whole-file reads are bounded before any allocation, and JSON nesting is bounded while parsing.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Runs `f` on another thread and fails the test (instead of hanging the suite) if it takes more than 10 s.
std::string error_within_seconds(const std::function<void()>& f) {
  auto result = std::async(std::launch::async, [&] { return error_of(f); });
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "the call blocked";
    std::_Exit(1);  // a blocked reader cannot be cancelled; end the test binary rather than hang CI
  }
  return result.get();
}

TEST(RegularFiles, SymbolicLinksLikeTheHuggingFaceCacheAreFollowed) {
  const auto dir = temp_dir("cache");
  fs::create_directories(dir / "blobs");
  fs::create_directories(dir / "snapshots" / "rev");
  write_bytes(dir / "blobs" / "abc123", "{\"model_type\": \"pegasus\"}");
  fs::create_symlink("../../blobs/abc123", dir / "snapshots" / "rev" / "config.json");
  EXPECT_EQ(util::read_json_file(dir / "snapshots" / "rev" / "config.json")["model_type"], "pegasus");
  EXPECT_EQ(util::file_kind_problem(dir / "snapshots" / "rev" / "config.json"), "");
}

TEST(RegularFiles, AFifoIsRefusedByNameWithoutBlocking) {
  const auto fifo = temp_dir("fifo") / "config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto message = error_within_seconds([&] { util::read_json_file(fifo); });
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;
  EXPECT_NE(message.find("FIFO"), std::string::npos) << message;
  // The descriptor-level check too: opening never blocks, and the opened FIFO is refused.
  const auto opened = error_within_seconds([&] { util::ReadableFile file(fifo, "the data file"); });
  EXPECT_NE(opened.find("FIFO"), std::string::npos) << opened;
}

TEST(RegularFiles, DevicesFoldersMissingFilesAndLinkLoopsAreRefusedByName) {
  const auto device = error_of([] { util::read_file("/dev/zero"); });
  EXPECT_NE(device.find("character device"), std::string::npos) << device;
  const auto dir = temp_dir("kinds");
  const auto folder = error_of([&] { util::read_file(dir); });
  EXPECT_NE(folder.find("is a folder"), std::string::npos) << folder;
  const auto missing = error_of([&] { util::read_file(dir / "nothing.json"); });
  EXPECT_NE(missing.find("does not exist"), std::string::npos) << missing;
  fs::create_symlink("b", dir / "a");
  fs::create_symlink("a", dir / "b");
  const auto loop = error_of([&] { util::read_file(dir / "a"); });
  EXPECT_NE(loop.find("loop"), std::string::npos) << loop;
  fs::create_symlink("/dev/zero", dir / "link-to-device");
  const auto linked = error_of([&] { util::MappedFile mapped(dir / "link-to-device", "the weights file"); });
  EXPECT_NE(linked.find("character device"), std::string::npos) << linked;
}

TEST(RegularFiles, ReadsAreBoundedBeforeAllocating) {
  const auto file = temp_dir("big") / "big.json";
  write_bytes(file, std::string(4096, ' ') + "{}");
  EXPECT_EQ(util::read_file(file).size(), 4098u);
  const auto message = error_of([&] { util::read_file(file, 1000); });
  EXPECT_NE(message.find("4098 bytes, more than the 1000-byte limit"), std::string::npos) << message;
  EXPECT_NE(error_of([&] { util::read_json_file(file, 100); }).find("limit"), std::string::npos);
}

TEST(RegularFiles, AnEmptyFileMapsToNoBytes) {
  const auto file = temp_dir("empty") / "empty.bin";
  write_bytes(file, "");
  util::MappedFile mapped(file, "the weights file");
  EXPECT_EQ(mapped.size(), 0u);
  EXPECT_EQ(util::read_file(file), "");
}

TEST(JsonBounds, NestingBeyondTheBoundIsRefusedWhileParsing) {
  // 10^6 levels overflowed the stack of recursive walks (copy, dump) before; now parsing stops at the bound.
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  const auto message = error_of([&] { util::parse_json(deep, "'config.json'"); });
  EXPECT_NE(message.find("'config.json'"), std::string::npos) << message;
  EXPECT_NE(message.find("nest more than 64 levels"), std::string::npos) << message;
  const std::string deep_objects = [] {
    std::string text;
    for (int i = 0; i < 200000; ++i) text += "{\"a\":";
    return text + "1" + std::string(200000, '}');
  }();
  EXPECT_NE(error_of([&] { util::parse_json(deep_objects, "x"); }).find("64 levels"), std::string::npos);
  // The bound itself is allowed: 64 levels parse and equal what nlohmann builds.
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_EQ(util::parse_json(ok, "x"), nlohmann::json::parse(ok));
  EXPECT_NE(error_of([&] { util::parse_json("[" + ok + "]", "x"); }), "");
}

TEST(JsonBounds, SyntaxErrorsNameTheSourceAndByteWithoutNlohmannsPrefix) {
  try {
    util::parse_json("{\"a\": tru}", "'generation_config.json'");
    FAIL() << "no error";
  } catch (const util::JsonError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find("[json.exception"), std::string::npos) << message;
    EXPECT_NE(message.find("'generation_config.json' is not valid JSON (byte"), std::string::npos) << message;
    EXPECT_EQ(e.reason().find("generation_config"), std::string::npos) << e.reason();
  }
}


// Found by the safetensors fuzzer (fuzz/regressions/safetensors/): a number past a double's range is valid JSON
// syntax, and nlohmann threw its own out_of_range for it, which escaped every reader as an undocumented exception.
TEST(JsonBounds, ANumberPastADoublesRangeIsAJsonErrorNamingTheSource) {
  for (const std::string text : {"[1e999]", "{\"data_offsets\": [44e44444]}", "-1e400"}) {
    try {
      util::parse_json(text, "'model.safetensors' header");
      FAIL() << "no error for " << text;
    } catch (const util::JsonError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("'model.safetensors' header is not valid JSON (number overflow parsing"),
                std::string::npos)
          << message;
      EXPECT_EQ(message.find("[json.exception"), std::string::npos) << message;
    }
  }
}
}  // namespace
}  // namespace fitsum::test
