// What a name resolves to before anything is read: regular files (also through symbolic links laid out like Hugging
// Face's cache) are read; FIFOs, devices, folders, missing files and link loops are refused by name, at once,
// without blocking. Whole-file reads are bounded before any allocation, and JSON nesting is bounded while parsing.
// What fitsum writes (OutputWriter.*): a device node, a FIFO or a descriptor is written through and never replaced,
// a symbolic link stays a link, a file size limit is reported like a full disk, and temporary files are removed by
// a signal or, when their writer was killed, by the next write of the same file (decided by their lock).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <future>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

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

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The names in `dir` that hold ".tmp-".
std::vector<std::string> temporaries_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name.find(".tmp-") != std::string::npos) names.push_back(name);
  }
  return names;
}

// The tests run as root (CI's containers), so they make their own /dev/null rather than risk the machine's.
TEST(OutputWriter, ACharacterDeviceIsWrittenThroughNotReplaced) {
  const auto dir = temp_dir("device");
  const auto null = dir / "null";
  if (::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) GTEST_SKIP() << "mknod needs root";
  util::write_file_atomic(null, "{\"eval_loss\": 1.0}\n");
  {
    util::AtomicFileWriter writer(null);
    EXPECT_TRUE(writer.writes_through());
    writer.write("x", 1);
    writer.commit();
  }
  struct stat st {};
  ASSERT_EQ(::lstat(null.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "replaced by a regular file";
  EXPECT_EQ(st.st_rdev, makedev(1, 3));
  EXPECT_TRUE(temporaries_in(dir).empty());
}

TEST(OutputWriter, AFifoIsWrittenThroughToItsReader) {
  const auto fifo = temp_dir("fifo") / "predictions.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto reader = std::async(std::launch::async, [&] { return read_text(fifo); });  // opens, reads to the end
  const auto error = error_within_seconds([&] { util::write_file_atomic(fifo, "{\"id\": 1}\n"); });
  EXPECT_EQ(error, "");
  ASSERT_EQ(reader.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(reader.get(), "{\"id\": 1}\n");
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(OutputWriter, AFifoWithoutAReaderIsRefusedAfterTheWaitNotHungOn) {
  const auto fifo = temp_dir("fifo-alone") / "out.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  const auto error = error_within_seconds([&] { util::AtomicFileWriter writer(fifo, std::chrono::milliseconds(300)); });
  EXPECT_NE(error.find("no process opened this FIFO for reading within 0.3 s"), std::string::npos) << error;
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
}

TEST(OutputWriter, ASymbolicLinkStaysALinkAndItsTargetIsReplaced) {
  const auto dir = temp_dir("link");
  fs::create_directories(dir / "results");
  write_bytes(dir / "results" / "metrics.json", "old");
  ::chmod((dir / "results" / "metrics.json").c_str(), 0600);
  fs::create_symlink("results/metrics.json", dir / "latest.json");
  util::write_file_atomic(dir / "latest.json", "new");
  EXPECT_TRUE(fs::is_symlink(dir / "latest.json"));
  EXPECT_EQ(fs::read_symlink(dir / "latest.json"), "results/metrics.json");
  EXPECT_EQ(read_text(dir / "results" / "metrics.json"), "new");
  EXPECT_EQ(fs::status(dir / "results" / "metrics.json").permissions(), fs::perms::owner_read | fs::perms::owner_write);
  // A dangling link: its target is created.
  fs::create_symlink("results/new.json", dir / "dangling.json");
  util::write_file_atomic(dir / "dangling.json", "made");
  EXPECT_TRUE(fs::is_symlink(dir / "dangling.json"));
  EXPECT_EQ(read_text(dir / "results" / "new.json"), "made");
  EXPECT_TRUE(temporaries_in(dir).empty() && temporaries_in(dir / "results").empty());
}

TEST(OutputWriter, ADescriptorNameIsWrittenThrough) {
  int pipe_ends[2];
  ASSERT_EQ(::pipe(pipe_ends), 0);
  // /dev/fd/N resolves to "pipe:[inode]", which is no path: the descriptor itself is written.
  util::write_file_atomic("/dev/fd/" + std::to_string(pipe_ends[1]), "through");
  ::close(pipe_ends[1]);
  char buffer[16] = {};
  EXPECT_EQ(::read(pipe_ends[0], buffer, sizeof buffer), 7);
  EXPECT_EQ(std::string(buffer), "through");
  ::close(pipe_ends[0]);
}

TEST(OutputWriter, ATemporaryNobodyHoldsIsRemovedByTheNextWriteOfItsFile) {
  const auto dir = temp_dir("stale");
  // pid 1 is alive (init) but is no fitsum writer: the lock decides, not the pid.
  for (const char* name : {"out.jsonl.tmp-1", "out.jsonl.tmp-999999999", "out.jsonl.tmp-backup", "other.tmp-1"}) {
    write_bytes(dir / name, "partial");
  }
  const auto held = dir / "out.jsonl.tmp-2";
  write_bytes(held, "a live writer's");
  EXPECT_FALSE(util::held_by_live_writer(held));
  {
    util::FileLock lock(held);  // another open file: what a running writer holds
    ASSERT_TRUE(lock.held());
    EXPECT_TRUE(util::held_by_live_writer(held));
    util::write_file_atomic(dir / "out.jsonl", "done");
    EXPECT_TRUE(fs::exists(held)) << "a live writer's temporary was removed";
  }
  EXPECT_FALSE(util::held_by_live_writer(held));
  EXPECT_FALSE(fs::exists(dir / "out.jsonl.tmp-1"));
  EXPECT_FALSE(fs::exists(dir / "out.jsonl.tmp-999999999"));
  EXPECT_TRUE(fs::exists(dir / "out.jsonl.tmp-backup"));  // not a writer's name
  EXPECT_TRUE(fs::exists(dir / "other.tmp-1"));           // another file's
  EXPECT_EQ(read_text(dir / "out.jsonl"), "done");
}

TEST(OutputWriter, AWriterHoldsItsTemporaryForItsWholeLife) {
  const auto dir = temp_dir("held");
  const auto temporary = util::temporary_file_name(dir / "out.jsonl");
  {
    util::AtomicFileWriter writer(dir / "out.jsonl");
    writer.write("x", 1);
    EXPECT_TRUE(util::held_by_live_writer(temporary));
    util::write_file_atomic(dir / "other.json", "y");  // another writer in the folder leaves it alone
    EXPECT_TRUE(fs::exists(temporary));
  }  // not committed: removed
  EXPECT_FALSE(fs::exists(temporary));
  EXPECT_FALSE(fs::exists(dir / "out.jsonl"));
}

// Runs `body` in a child process and returns its wait status and what it wrote to the pipe it is given.
std::pair<int, std::string> in_child(const std::function<void(int)>& body) {
  int pipe_ends[2];
  if (::pipe(pipe_ends) != 0) return {-1, ""};
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_ends[0]);
    body(pipe_ends[1]);
    ::_exit(0);
  }
  ::close(pipe_ends[1]);
  std::string text;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_ends[0], buffer, sizeof buffer)) > 0;)
    text.append(buffer, static_cast<std::size_t>(n));
  ::close(pipe_ends[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return {status, text};
}

TEST(OutputWriter, AFileSizeLimitIsReportedLikeAFullDisk) {
  const auto dir = temp_dir("fsize");
  const auto [status, message] = in_child([&](int out) {
    std::signal(SIGXFSZ, SIG_IGN);  // as fitsum's main does
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const std::string error = error_of([&] { util::write_file_atomic(dir / "big.bin", std::string(10000, 'x')); });
    (void)!::write(out, error.data(), error.size());
  });
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_NE(message.find("cannot write '" + (dir / "big.bin").string() + "': File too large; "), std::string::npos)
      << message;
  EXPECT_NE(message.find("ulimit -f"), std::string::npos) << message;
  EXPECT_TRUE(temporaries_in(dir).empty());
  EXPECT_FALSE(fs::exists(dir / "big.bin"));
}

TEST(OutputWriter, ATerminatingSignalRemovesTheOpenTemporaryAndStillEndsTheProcess) {
  const auto dir = temp_dir("signal");
  const auto child = in_child([&](int) {
    std::signal(SIGTERM, SIG_DFL);
    util::remove_temporary_files_on_signals();
    util::AtomicFileWriter writer(dir / "out.jsonl");
    writer.write("partial", 7);
    ::raise(SIGTERM);
  });
  const int status = child.first;
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_EQ(temporaries_in(dir), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(dir / "out.jsonl"));
}
}  // namespace
}  // namespace fitsum::test
