// `fitsum train` when the world misbehaves: a full or failing disk while saving (an LD_PRELOAD shim injects ENOSPC
// and EIO), a hang-up or a closed stdout, a damaged checkpoint position, a diverging run, and flag values that used
// to crash (a batch product that wraps to 0), hang (100,000 threads) or run for ever. None may crash, hang, leave a
// partial checkpoint or a temporary folder where a reader sees it, or exit 0 with a wrong result.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/io/hf_config.h"
#include "fitsum/train/training_job.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

fs::path write_records(const fs::path& dir) { return write_copy_task_records(dir / "eight.jsonl"); }

std::string train(const fs::path& data, const fs::path& out, const std::string& flags) {
  return fitsum_binary().string() + " train --model_name_or_path '" +
         (shared_dir() / "fixtures" / "tiny-pegasus").string() + "' --train_file '" + data.string() +
         "' --output_dir '" + out.string() + "' --optim adafactor --per_device_train_batch_size 4 " + flags;
}

// Names in `dir` that a reader must never see after a run ended: temporary, old and trash folders.
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind(".checkpoint-", 0) == 0) names.push_back(e.path().filename().string());
  }
  return names;
}

void expect_complete_checkpoints(const fs::path& out) {
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().filename().string().rfind("checkpoint-", 0) != 0) continue;
    for (const char* file : {"model.safetensors", "config.json", "optimizer.safetensors", "rng_state.safetensors",
                             "scheduler.json", "trainer_state.json", "fitsum_state.json", "training_args.json"}) {
      EXPECT_TRUE(fs::exists(e.path() / file)) << e.path() << "/" << file;
    }
  }
}

void expect_one_line_error(const CommandResult& r, int status, const std::string& needle) {
  EXPECT_EQ(r.exit_code, status) << r.output;
  const auto line = r.output.find("fitsum: error: ");
  ASSERT_NE(line, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n', line), r.output.size() - 1) << r.output;  // the error is the last line, and one
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

struct Fault {
  const char* op;
  const char* error;
  const char* under;  // which paths under the output folder fail: the temporary folder or the commit's target
};

class DiskFault : public ::testing::TestWithParam<Fault> {};

TEST_P(DiskFault, DuringASaveLeavesNoPartialCheckpointAndNoFolderBehind) {
  FITSUM_REQUIRE_SHARED();
  const Fault fault = GetParam();
  const auto dir = temp_dir(std::string("fault-") + fault.op + "-" + fault.error);
  const auto data = write_records(dir);
  const auto out = dir / "out";
  // The first checkpoint saves; then every call of `op` on the paths of the second one fails.
  const auto first = run_command(train(data, out, "--max_steps 1 --save_steps 1 --logging_steps 1"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string env = std::string("LD_PRELOAD='") + FITSUM_FAULTS_LIBRARY + "' FITSUM_FAULT_OP=" + fault.op +
                          " FITSUM_FAULT_ERRNO=" + fault.error + " FITSUM_FAULT_UNDER='" +
                          (out / fault.under).string() + "' ";
  const auto r = run_command(env + train(data, out,
                                         "--max_steps 3 --save_steps 1 --logging_steps 1 "
                                         "--resume_from_checkpoint latest"));
  EXPECT_NE(r.output.find("fault-injection: " + std::string(fault.op)), std::string::npos) << r.output;
  expect_one_line_error(r, 1, fault.error == std::string("ENOSPC") ? "No space left on device" : "Input/output error");
  EXPECT_TRUE(leftovers(out).empty()) << leftovers(out).front();
  EXPECT_TRUE(fs::exists(out / "checkpoint-1"));
  EXPECT_FALSE(fs::exists(out / "checkpoint-2"));
  expect_complete_checkpoints(out);
}

INSTANTIATE_TEST_SUITE_P(Faults, DiskFault,
                         ::testing::Values(Fault{"write", "ENOSPC", ".checkpoint-2"},
                                           Fault{"write", "EIO", ".checkpoint-2"},
                                           Fault{"fsync", "EIO", ".checkpoint-2"},
                                           Fault{"rename", "EIO", "checkpoint-2"}));

// Starts `command`, waits for `ready` to exist, sends `signal_number`; returns the exit status (128 + N if killed).
int run_and_signal(const std::string& command, const fs::path& ready, int signal_number) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + command + " > /dev/null 2>&1").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(ready) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, signal_number);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(Interruptions, AHangUpSavesACheckpointAndExits129) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("sighup");
  const auto out = dir / "out";
  const int status =
      run_and_signal(train(write_records(dir), out, "--max_steps 100000 --save_steps 2 --logging_steps 1"),
                     out / "checkpoint-2", SIGHUP);
  EXPECT_EQ(status, 129);  // before: killed by SIGHUP with no checkpoint of the last step
  EXPECT_TRUE(fs::exists(out / "checkpoint-2"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  expect_complete_checkpoints(out);
  EXPECT_TRUE(leftovers(out).empty());
}

TEST(Interruptions, AClosedStdoutDoesNotStopTraining) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("sigpipe");
  const auto out = dir / "out";
  // head exits after the first line; every later log line is written to a closed pipe (SIGPIPE killed the run).
  const auto r = run_command(train(write_records(dir), out, "--max_steps 4 --logging_steps 1 --save_strategy no") +
                             " | head -n 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out / "model.safetensors")) << r.output;
  EXPECT_EQ(util::read_json_file(out / "trainer_state.json")["global_step"], 4);
}

TEST(Interruptions, ADamagedCheckpointPositionIsRefused) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("position");
  const auto data = write_records(dir);
  const auto out = dir / "out";
  auto r = run_command(train(data, out, "--max_steps 1 --save_steps 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Each damage alone, in a copy of the good files: -7 crashed (SIGSEGV); the wrong types escaped as raw JSON library
  // errors without the file. 10^12 and other positions: the CheckpointFolders unit test.
  const auto position_file = out / "checkpoint-1" / "fitsum_state.json";
  const auto state_file = out / "checkpoint-1" / "trainer_state.json";
  const auto good_position = util::read_json_file(position_file);
  const auto good_state = util::read_json_file(state_file);
  struct Damage {
    bool position;  // fitsum_state.json, else trainer_state.json
    std::function<void(nlohmann::json&)> edit;
    std::string expected;
  };
  const std::vector<Damage> damages = {
      {true, [](nlohmann::json& j) { j["step_in_epoch"] = -7; }, "field 'step_in_epoch' is -7; it must not be negative"},
      {true, [](nlohmann::json& j) { j["epoch"] = "one"; }, "field 'epoch' must be an integer, found string"},
      {true, [](nlohmann::json& j) { j.erase("seed"); }, "field 'seed' is missing"},
      {true, [](nlohmann::json& j) { j["total_loss"] = nullptr; }, "field 'total_loss' must be a number, found null"},
      {false, [](nlohmann::json& j) { j["log_history"] = 3; }, "field 'log_history' must be an array, found number"},
      {false, [](nlohmann::json& j) { j["best_model_checkpoint"] = 7; }, "field 'best_model_checkpoint' must be a string"},
  };
  for (const auto& damage : damages) {
    auto position = good_position;
    auto state = good_state;
    damage.edit(damage.position ? position : state);
    util::write_json_file_atomic(position_file, position);
    util::write_json_file_atomic(state_file, state);
    r = run_command(train(data, out, "--max_steps 2 --resume_from_checkpoint latest"));
    expect_one_line_error(r, 1, damage.expected);
    EXPECT_NE(r.output.find(damage.position ? "fitsum_state.json" : "trainer_state.json"), std::string::npos)
        << r.output;
  }
}

TEST(Interruptions, ADivergingRunStopsNamingTheStep) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("diverge");
  const auto out = dir / "out";
  // AdamW's first update moves every weight by about the learning rate: 1e30 overflows the next forward pass.
  const auto r = run_command(train(write_records(dir), out,
                                   "--optim adamw_torch --learning_rate 1e30 --max_steps 5 --logging_steps 1 "
                                   "--save_strategy no"));
  expect_one_line_error(r, 1, "training diverged at step");
  EXPECT_FALSE(fs::exists(out / "model.safetensors")) << "a NaN model was saved";
}

TEST(Interruptions, FlagValuesThatCrashedOrHungAreRefusedBeforeAnyWork) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("flags");
  const auto data = write_records(dir);
  const auto out = dir / "out";
  const std::vector<std::pair<std::string, std::string>> cases = {
      // The product wrapped to 0 (SIGFPE).
      {"--per_device_train_batch_size 4294967296 --gradient_accumulation_steps 4294967296",
       "per_device_train_batch_size is 4294967296"},
      {"--per_device_train_batch_size 4096 --gradient_accumulation_steps 8192", "examples per optimizer step"},
      {"--num_threads 100000", "num_threads must be between 0"},  // never finished starting threads
      {"--num_threads -4", "num_threads must be between 0"},      // silently ignored
      {"--learning_rate inf", "learning_rate must be a finite number"},
      {"--num_train_epochs 1e300", "num_train_epochs must be in"},  // "-9223372036854775808 optimizer steps"
  };
  for (const auto& [flags, needle] : cases) {
    const auto start = std::chrono::steady_clock::now();
    const auto r = run_command("timeout -s KILL 60 " + train(data, out, flags));
    expect_one_line_error(r, 2, needle);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << flags;
  }
}

std::uint64_t folder_bytes(const fs::path& dir) {
  std::uint64_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) bytes += e.file_size();
  }
  return bytes;
}

// A disk that cannot take one checkpoint is reported before the model loads (before: nothing until the first save
// failed, possibly hours in). A warning, not an error: the run goes on. The prediction it is compared with holds a
// real checkpoint of the fixture model, with at most its 256 KiB allowance to spare.
TEST(Interruptions, ADiskTooSmallForOneCheckpointIsReportedBeforeTheModelLoads) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("free-disk");
  const auto data = write_records(dir);
  const auto tiny = shared_dir() / "fixtures" / "tiny-pegasus";
  const std::string warning = "KiB free, less than one checkpoint takes (about ";

  auto r = run_command(train(data, dir / "roomy", "--max_steps 1 --save_steps 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find(warning), std::string::npos) << r.output;
  const auto written = folder_bytes(dir / "roomy" / "checkpoint-1");
  const auto config = io::model_config_from_hf(util::read_json_file(tiny / "config.json"), "config.json");
  const auto predicted = train::predicted_checkpoint_bytes(config, optim::OptimizerType::adafactor, 0);
  EXPECT_GE(predicted, written);
  EXPECT_LE(predicted, written + 256 * 1024);

  const std::string nearly_full = std::string("LD_PRELOAD='") + FITSUM_FAULTS_LIBRARY +
                                  "' FITSUM_FAULT_FREE_BYTES=4096 FITSUM_FAULT_UNDER='" + dir.string() + "' ";
  // Weights that cannot be read: the warning still comes, so it came before they were read.
  const auto damaged = dir / "damaged";
  fs::create_directories(damaged);
  fs::copy_file(tiny / "config.json", damaged / "config.json");
  write_bytes(damaged / "model.safetensors", "not a safetensors file");
  r = run_command(nearly_full + fitsum_binary().string() + " train --model_name_or_path '" + damaged.string() +
                  "' --train_file '" + data.string() + "' --output_dir '" + (dir / "full").string() +
                  "' --max_steps 1");
  EXPECT_NE(r.output.find("fitsum: warning: output_dir '" + (dir / "full").string() + "' has 4.00 " + warning),
            std::string::npos)
      << r.output;
  expect_one_line_error(r, 1, "model.safetensors");

  r = run_command(nearly_full + train(data, dir / "warned", "--max_steps 1 --save_steps 1"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(warning), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir / "warned" / "checkpoint-1" / "model.safetensors"));
}

TEST(Interruptions, OutputPathsAreCheckedBeforeTheModelLoads) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("output-paths");
  const auto data = write_records(dir);
  write_bytes(dir / "a-file", "x");
  // Before: the run trained, then failed to save (or the predictions were lost after the whole evaluation).
  auto r = run_command(train(data, dir / "a-file" / "out", "--max_steps 1"));
  expect_one_line_error(r, 1, "output_dir");
  EXPECT_EQ(r.output.find("training:"), std::string::npos) << r.output;
  r = run_command(fitsum_binary().string() + " eval --model_name_or_path '" +
                  (shared_dir() / "fixtures" / "tiny-pegasus").string() + "' --test_file '" + data.string() +
                  "' --predictions_file '" + (dir / "missing" / "predictions.jsonl").string() + "'");
  expect_one_line_error(r, 1, "does not exist");
  EXPECT_EQ(r.output.find("eval_loss"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace fitsum::test
