// Stop requests at the moments that used to be slow or ignored: SIGINT during an evaluation (which ran to its end
// first) and a second Ctrl-C (which was ignored: the run went on saving). Label slow: each run evaluates or trains
// for several seconds.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "test_support.h"

namespace fitsum::test {
namespace {

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Starts `command` with stdout and stderr in `log`; returns its pid.
pid_t start(const std::string& command, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + command + " > '" + log.string() + "' 2>&1").c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// Waits up to 120 s until `ready()`; false if the process ended first.
bool wait_until(pid_t pid, const std::function<bool()>& ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!ready() && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return ready();
}

int wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string train_command(const fs::path& out, const std::string& flags) {
  const auto samsum = source_dir() / "data" / "samsum";
  return fitsum_binary().string() + " train --model_name_or_path '" +
         (shared_dir() / "data" / "pegasus-tiny").string() + "' --train_file '" + (samsum / "train.jsonl").string() +
         "' --output_dir '" + out.string() +
         "' --optim adafactor --max_source_length 64 --max_target_length 16 --per_device_train_batch_size 4 "
         "--logging_steps 1 " +
         flags;
}

TEST(Signals, SigintDuringEvaluationStopsItAndSavesTheStep) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("sigint-eval");
  const auto out = dir / "out";
  const auto log = dir / "log.txt";
  // An evaluation of 300 examples with generation after step 1: seconds, against a few ms to react.
  const pid_t pid = start(train_command(out,
                                        "--max_steps 3 --save_strategy no --evaluation_strategy steps "
                                        "--eval_steps 1 --predict_with_generate --generation_max_length 64 "
                                        "--validation_file '" +
                                            (source_dir() / "data" / "samsum" / "train.jsonl").string() + "'"),
                          log);
  ASSERT_TRUE(wait_until(pid, [&] { return file_text(log).find("\"loss\"") != std::string::npos; })) << file_text(log);
  ::kill(pid, SIGINT);
  EXPECT_EQ(wait_for(pid), 130) << file_text(log);
  const auto text = file_text(log);
  EXPECT_EQ(text.find("eval_loss"), std::string::npos) << "the evaluation ran to its end first:\n" << text;
  EXPECT_TRUE(fs::exists(out / "checkpoint-1" / "trainer_state.json")) << text;
}

TEST(Signals, ASecondCtrlCExitsAtOnce) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("second-sigint");
  const auto out = dir / "out";
  const auto log = dir / "log.txt";
  const pid_t pid = start(train_command(out, "--max_steps 100000 --save_steps 2"), log);
  ASSERT_TRUE(wait_until(pid, [&] { return fs::exists(out / "checkpoint-2"); })) << file_text(log);
  ::kill(pid, SIGINT);
  // The second only once the first was handled (two pending SIGINTs would merge into one).
  ASSERT_TRUE(wait_until(pid, [&] { return file_text(log).find("fitsum: stopping") != std::string::npos; }))
      << file_text(log);
  ::kill(pid, SIGINT);
  EXPECT_EQ(wait_for(pid), 130) << file_text(log);
  // The first asked for a checkpoint and a stop; the second ended the process before it (no "stopped by" line).
  EXPECT_EQ(file_text(log).find("stopped by signal"), std::string::npos) << file_text(log);
  for (const auto& e : fs::directory_iterator(out)) {
    const auto name = e.path().filename().string();
    if (name.rfind("checkpoint-", 0) == 0) EXPECT_TRUE(fs::exists(e.path() / "trainer_state.json")) << name;
  }
}

}  // namespace
}  // namespace fitsum::test
