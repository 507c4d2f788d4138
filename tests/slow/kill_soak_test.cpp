// kill -9 at random moments of `fitsum train --save_steps 1 --save_total_limit 2` (0 to 1.5 s after training began),
// restarted after each kill with --resume_from_checkpoint latest, until FITSUM_SOAK_KILLS kills (50 by default) hit
// a run that was training. After every kill, every visible
// checkpoint-N must be complete and loadable; after every restart that got as far as training, no temporary or
// trash folder of an earlier run may remain; and every run that finishes must end with model.safetensors
// byte-identical to an uninterrupted run's.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/io/checkpoint.h"
#include "fitsum/io/output_folder_lock.h"
#include "fitsum/io/safetensors.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

fs::path write_records(const fs::path& dir) { return write_copy_task_records(dir / "eight.jsonl"); }

std::string train_command(const fs::path& data, const fs::path& out) {
  return fitsum_binary().string() + " train --model_name_or_path '" +
         (shared_dir() / "fixtures" / "tiny-pegasus").string() + "' --train_file '" + data.string() +
         "' --output_dir '" + out.string() +
         "' --config_overrides dropout=0.1 --optim adafactor --learning_rate 1e-3 --max_steps 40 "
         "--logging_steps 1 --save_steps 1 --save_total_limit 2 --per_device_train_batch_size 2 "
         "--gradient_accumulation_steps 2 --warmup_steps 5 --seed 5";
}

bool is_checkpoint(const std::string& name) { return std::regex_match(name, std::regex("checkpoint-[0-9]+")); }
// What a save leaves behind while it runs or prunes: never to be seen after the next start. The lock file is not:
// a killed run leaves it, and the next run locks the same file.
bool is_temporary(const std::string& name) {
  if (name == io::kOutputFolderLockName) return false;
  return name.find(".tmp-") != std::string::npos || name.rfind(".", 0) == 0;
}

// Every file a checkpoint holds, parsed or loaded the way a resume reads it. Empty when complete.
std::string checkpoint_problem(const fs::path& dir) {
  try {
    auto folder = io::open_model_folder(dir);
    model::Seq2SeqLM model(folder.config);
    io::load_weights(*model, folder);
    for (const char* json : {"trainer_state.json", "fitsum_state.json", "scheduler.json", "training_args.json"}) {
      (void)util::read_json_file(dir / json);
    }
    io::SafetensorsReader optimizer(dir / "optimizer.safetensors");
    io::SafetensorsReader rng(dir / "rng_state.safetensors");
    if (optimizer.entries().empty() || !rng.contains("generator")) return "empty optimizer or rng state";
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::set<std::string> entries_of(const fs::path& dir, bool (*keep)(const std::string&)) {
  std::set<std::string> names;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    if (keep(entry.path().filename().string())) names.insert(entry.path().filename().string());
  }
  return names;
}

// Starts `command` (stdout and stderr to `log`), returns its pid.
pid_t start(const std::string& command, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + command + " > '" + log.string() + "' 2>&1").c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Waits until the process has started training (its log says "training:"), then up to `delay` more; kills it with
// SIGKILL if it still runs. The delay counts from the start of training, not of the process: on a loaded machine
// start-up alone can outlast a delay counted from the start, and such kills never meet a save. Returns true if it
// was killed; `in_training` says whether training had begun.
bool kill_after(pid_t pid, const fs::path& log, std::chrono::milliseconds delay, int& status, bool& in_training) {
  in_training = false;
  const auto start_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (std::chrono::steady_clock::now() < start_deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return false;
    if (file_text(log).find("training:") != std::string::npos) {
      in_training = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const auto deadline = std::chrono::steady_clock::now() + delay;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return true;
}

TEST(KillSoak, RandomKillsNeverLeaveAPartialCheckpointOrAFolderBehind) {
  FITSUM_REQUIRE_SHARED();
  const char* wanted = std::getenv("FITSUM_SOAK_KILLS");
  const int kills_wanted = wanted ? std::atoi(wanted) : 50;
  const auto dir = temp_dir("soak");
  const auto data = write_records(dir);
  const auto reference = run_command(train_command(data, dir / "uninterrupted"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::string want = file_text(dir / "uninterrupted" / "model.safetensors");

  std::mt19937 rng(20240611);
  std::uniform_int_distribution<int> delay_ms(0, 1500);  // after training began: about 0 to 10 steps and saves
  int kills = 0, kills_in_training = 0, partial = 0, leaked = 0, finished = 0, cycle = 0;
  fs::path out = dir / "run-0";
  std::set<std::string> stale;  // temporary folders present before the current start
  for (int attempt = 0; kills_in_training < kills_wanted && attempt < 40 * kills_wanted; ++attempt) {
    const bool resume = !entries_of(out, is_checkpoint).empty();
    const auto log = dir / ("log-" + std::to_string(attempt) + ".txt");
    const pid_t pid = start(train_command(data, out) + (resume ? " --resume_from_checkpoint latest" : ""), log);
    int status = 0;
    bool in_training = false;
    const bool killed = kill_after(pid, log, std::chrono::milliseconds(delay_ms(rng)), status, in_training);
    const std::string output = file_text(log);
    if (output.find("\"step\"") != std::string::npos) {  // it trained, so its start-up cleanup had run
      for (const auto& name : stale) {
        if (fs::exists(out / name)) {
          ++leaked;
          ADD_FAILURE() << "'" << name << "' survived a restart (attempt " << attempt << ")";
        }
      }
    }
    for (const auto& name : entries_of(out, is_checkpoint)) {
      const auto problem = checkpoint_problem(out / name);
      if (!problem.empty()) {
        ++partial;
        ADD_FAILURE() << "visible partial " << name << " after attempt " << attempt << ": " << problem;
      }
    }
    stale = entries_of(out, is_temporary);
    if (killed) {
      ++kills;
      kills_in_training += in_training ? 1 : 0;
      continue;
    }
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
    ++finished;
    EXPECT_EQ(file_text(out / "model.safetensors"), want) << "cycle " << cycle << " ended with other weights";
    EXPECT_TRUE(entries_of(out, is_temporary).empty()) << "cycle " << cycle << " left temporary folders";
    out = dir / ("run-" + std::to_string(++cycle));
    stale.clear();
  }
  std::cout << "kill -9 soak: " << kills << " kills (" << kills_in_training << " during training), " << finished
            << " finished runs, " << partial << " visible partial checkpoints, " << leaked << " leaked folders\n";
  RecordProperty("kills", kills);
  RecordProperty("kills_in_training", kills_in_training);
  RecordProperty("visible_partial_checkpoints", partial);
  RecordProperty("leaked_folders", leaked);
  EXPECT_GE(kills_in_training, kills_wanted);
  EXPECT_GE(finished, 1);  // the byte-identical final weights were compared at least once
  EXPECT_EQ(partial, 0);
  EXPECT_EQ(leaked, 0);
}

}  // namespace
}  // namespace fitsum::test
