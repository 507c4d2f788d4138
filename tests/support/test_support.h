// Helpers shared by the test binaries: where the reference material is, and sampled-tensor comparisons in the
// format of ../shared/fixtures (index/value pairs into a flattened tensor).
#pragma once

#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fitsum/train/distributed.h"

namespace fitsum::test {

namespace fs = std::filesystem;

// ../shared beside the project (reference fixtures and full data; present in development and CI).
fs::path shared_dir();
// The project's source folder.
fs::path source_dir();
// The fitsum binary under test.
fs::path fitsum_binary();
// A fresh, empty temporary folder unique to the calling test.
fs::path temp_dir(const std::string& name);

// What `f` throws as an `E`, as its message; "" when it returns. Another exception escapes and fails the test.
template <typename E = std::exception>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

struct CommandResult {
  int exit_code = 0;
  std::string output;  // stdout and stderr together
};
// Runs a shell command line and captures its output and exit status.
CommandResult run_command(const std::string& command_line);

// Eight pre-tokenized copy-task records of different lengths (ids 103..166, within the tiny fixture's vocabulary,
// eos last) as jsonl at `file`; returns `file`.
fs::path write_copy_task_records(const fs::path& file);

// Rank `rank` of a job of `world_size` processes whose rendezvous is 127.0.0.1:`port` (threads of a test standing
// for the processes).
train::LaunchEnvironment local_job(int rank, int world_size, int port);

// Runs `body` as ranks 0 and 1 of a job (rank 1 on a thread of its own) joined over a real TCPStore rendezvous at
// 127.0.0.1 and Gloo; returns each rank's error, "" where its body returned.
std::vector<std::string> on_two_ranks(const std::function<void(int, std::shared_ptr<train::ProcessGroup>)>& body,
                                      std::chrono::seconds timeout = std::chrono::seconds(60));

// Writes bytes to a file, replacing it.
void write_bytes(const fs::path& path, const std::string& bytes);

// Rewrites a safetensors file's JSON header through `edit`, keeping the data area as it is (for corruption tests).
void edit_safetensors_header(const fs::path& file, const std::function<void(nlohmann::json&)>& edit);

}  // namespace fitsum::test

// Skips the calling test when ../shared is not present (a user's checkout); CI and development always have it.
#define FITSUM_REQUIRE_SHARED()                                                           \
  do {                                                                                    \
    if (!std::filesystem::exists(::fitsum::test::shared_dir() / "fixtures")) {            \
      GTEST_SKIP() << "reference material not found at " << ::fitsum::test::shared_dir(); \
    }                                                                                     \
  } while (0)
