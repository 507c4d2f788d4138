#include "test_support.h"

#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <cstdio>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "fitsum/train/local_launch.h"

namespace fitsum::test {

fs::path shared_dir() { return FITSUM_SHARED_DIR; }
fs::path source_dir() { return FITSUM_SOURCE_DIR; }
fs::path fitsum_binary() { return FITSUM_BINARY; }

fs::path temp_dir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string unique = name;
  if (info != nullptr) {
    unique = std::string(info->test_suite_name()) + "." + info->name() + "." + name;
  }
  const fs::path dir = fs::temp_directory_path() / ("fitsum-test-" + std::to_string(::getpid())) / unique;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

CommandResult run_command(const std::string& command_line) {
  CommandResult result;
  const std::string full = command_line + " 2>&1";
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) {
    result.exit_code = -1;
    return result;
  }
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), n);
  }
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

fs::path write_copy_task_records(const fs::path& file) {
  std::ofstream out(file);
  for (int i = 0; i < 8; ++i) {
    nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
    for (int j = 0; j < 3 + (i * 5) % 9; ++j) ids.push_back(103 + (i * 13 + j * 7) % 64);
    ids.push_back(1);
    for (int j = 0; j < 2 + (i * 3) % 6; ++j) labels.push_back(103 + (i * 11 + j * 5) % 64);
    labels.push_back(1);
    out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
  }
  return file;
}

train::LaunchEnvironment local_job(int rank, int world_size, int port) {
  train::LaunchEnvironment env;
  env.rank = rank;
  env.world_size = world_size;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  return env;
}

std::vector<std::string> on_two_ranks(const std::function<void(int, std::shared_ptr<train::ProcessGroup>)>& body,
                                      std::chrono::seconds timeout) {
  const int port = train::free_local_port();
  std::vector<std::string> errors(2);
  auto rank = [&](int r) {
    try {
      body(r, train::ProcessGroup::connect(local_job(r, 2, port), "gloo", timeout));
    } catch (const std::exception& e) {
      errors[static_cast<std::size_t>(r)] = e.what();
    }
  };
  std::thread other(rank, 1);
  rank(0);
  other.join();
  return errors;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void edit_safetensors_header(const fs::path& file, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  edit(header);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  write_bytes(file, out + text + bytes.substr(8 + n));
}

}  // namespace fitsum::test
