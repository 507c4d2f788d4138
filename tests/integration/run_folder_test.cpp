// The output folder of `fitsum train` as users meet it: a second run into the folder of a running one is refused at
// once naming the first's pid and deletes nothing of it (also with overwrite_output_dir, also for data-parallel jobs,
// whose rank 0 holds the lock), while `fitsum eval` reads the running run's checkpoints; overwrite_output_dir never
// deletes what the run reads; what a killed run left does not block a rerun; an output_dir that is no folder is named
// in one line; a refused run leaves no folder behind; resumes that cannot work say why (another model, another
// optimizer, the run's folder instead of a checkpoint), and a resume with nothing left to train reports sane rates.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/io/output_folder_lock.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

fs::path tiny_pegasus() { return shared_dir() / "fixtures" / "tiny-pegasus"; }

std::string train(const fs::path& data, const fs::path& out, const std::string& flags,
                  const fs::path& model = tiny_pegasus()) {
  return fitsum_binary().string() + " train --model_name_or_path '" + model.string() + "' --train_file '" +
         data.string() + "' --output_dir '" + out.string() + "' --optim adafactor --per_device_train_batch_size 4 " +
         flags;
}

void expect_one_line_error(const CommandResult& r, int status, const std::string& needle) {
  EXPECT_EQ(r.exit_code, status) << r.output;
  const auto line = r.output.find("fitsum: error: ");
  ASSERT_NE(line, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n', line), r.output.size() - 1) << r.output;  // the error is the last line, and one
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("filesystem error"), std::string::npos) << r.output;
}

// Every file under `dir` with its size: what a second run must leave as it was.
std::map<std::string, std::uintmax_t> snapshot(const fs::path& dir) {
  std::map<std::string, std::uintmax_t> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const auto name = fs::relative(e.path(), dir).string();
    files[name] = e.is_regular_file() ? e.file_size() : 0;
  }
  return files;
}

// Starts `command` in the background (its output in `log`); returns its pid (exec'd: the pid is fitsum's).
pid_t start(const std::string& command, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + command + " > '" + log.string() + "' 2>&1").c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

bool wait_for(const fs::path& path, std::chrono::seconds limit = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!fs::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The work folders and temporaries a reader must never see once runs have ended.
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (name.rfind(".checkpoint-", 0) == 0 || name.find(".tmp-") != std::string::npos) names.push_back(name);
  }
  return names;
}

// Before: both runs exited 0, each pruned the other's checkpoints, and `--overwrite_output_dir` from the second
// deleted the running first run's checkpoints. The first run is held with SIGSTOP while the second tries.
TEST(RunFolder, ASecondRunIntoARunningRunsFolderIsRefusedNamingItsPidAndDeletesNothing) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("two-runs");
  const auto data = write_copy_task_records(dir / "eight.jsonl");
  const auto out = dir / "out";
  const pid_t first =
      start(train(data, out, "--max_steps 1000000 --save_steps 1 --save_total_limit 2"), dir / "first.log");
  ASSERT_TRUE(wait_for(out / "checkpoint-2"));
  ASSERT_EQ(::kill(first, SIGSTOP), 0);
  const auto before = snapshot(out);
  ASSERT_TRUE(before.count(io::kOutputFolderLockName));
  const std::string busy =
      "output_dir '" + out.string() + "' is in use by another training run (pid " + std::to_string(first) + ", ";
  for (const char* flags :
       {"--max_steps 1", "--max_steps 1 --overwrite_output_dir", "--max_steps 1 --resume_from_checkpoint latest"}) {
    const auto r = run_command(train(data, out, flags));
    expect_one_line_error(r, 1, busy);
    EXPECT_EQ(r.output.find("train_file"), std::string::npos) << r.output;  // at once: no data was read
    EXPECT_EQ(snapshot(out), before) << flags;
  }
  // Reading needs no lock: a checkpoint of the running run evaluates.
  std::string newest;
  for (const auto& [name, size] : before) {
    if (name.rfind("checkpoint-", 0) == 0 && name.find('/') == std::string::npos) newest = name;
  }
  ASSERT_FALSE(newest.empty());
  const auto evaluated = run_command(fitsum_binary().string() + " eval --model '" + (out / newest).string() +
                                     "' --test_file '" + data.string() + "' --per_device_eval_batch_size 4");
  EXPECT_EQ(evaluated.exit_code, 0) << evaluated.output;
  EXPECT_NE(evaluated.output.find("eval_loss"), std::string::npos) << evaluated.output;

  ::kill(first, SIGTERM);
  ::kill(first, SIGCONT);
  EXPECT_EQ(wait_exit(first), 143);  // it went on and stopped as a stopped run does: a checkpoint, 128 + 15
  EXPECT_TRUE(leftovers(out).empty());
  EXPECT_FALSE(fs::exists(out / io::kOutputFolderLockName));  // the lock file goes with its run
  const auto resumed = run_command(train(data, out, "--max_steps 1 --resume_from_checkpoint latest"));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;  // the folder is free again
}

// Under --nproc_per_node (and torchrun) rank 0 holds the lock for the job; the launcher holds none.
TEST(RunFolder, ADataParallelJobsRankZeroHoldsTheLock) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("two-jobs");
  const auto data = write_copy_task_records(dir / "eight.jsonl");
  const auto out = dir / "out";
  const auto job = [&](const std::string& flags) {
    return train(data, out, "--per_device_train_batch_size 1 --nproc_per_node 2 " + flags);
  };
  const pid_t launcher = start(job("--max_steps 1000000 --save_strategy no"), dir / "first.log");
  ASSERT_TRUE(wait_for(out / io::kOutputFolderLockName));
  long holder = 0;
  for (int i = 0; i < 500 && holder == 0; ++i) {
    std::ifstream(out / io::kOutputFolderLockName) >> holder;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(holder, 0);
  EXPECT_NE(holder, static_cast<long>(launcher));
  const auto r = run_command(job("--max_steps 1 --overwrite_output_dir"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is in use by another training run (pid " + std::to_string(holder) + ", "), std::string::npos)
      << r.output;
  EXPECT_EQ(::kill(launcher, 0), 0);  // the first job trains on
  ::kill(launcher, SIGTERM);
  EXPECT_EQ(wait_exit(launcher), 143);
  EXPECT_FALSE(fs::exists(out / io::kOutputFolderLockName));
}

// `--model_name_or_path out/checkpoint-2 --output_dir out --overwrite_output_dir` deleted the checkpoint the run
// starts from. It is refused before anything is loaded or removed; a copy outside the folder trains.
TEST(RunFolder, OverwriteNeverDeletesWhatTheRunReads) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("overwrite-reads");
  const auto data = write_copy_task_records(dir / "eight.jsonl");
  const auto out = dir / "out";
  ASSERT_EQ(run_command(train(data, out, "--max_steps 2 --save_steps 1")).exit_code, 0);
  fs::copy_file(data, out / "checkpoint-1" / "data.jsonl");
  const auto before = snapshot(out);
  auto r = run_command(train(data, out, "--max_steps 1 --overwrite_output_dir", out / "checkpoint-2"));
  expect_one_line_error(r, 2,
                        "model_name_or_path '" + (out / "checkpoint-2").string() + "' lies in " +
                            (out / "checkpoint-2").string() +
                            ", a checkpoint of the earlier run that overwrite_output_dir removes");
  EXPECT_EQ(snapshot(out), before);
  r = run_command(train(out / "checkpoint-1" / "data.jsonl", out, "--max_steps 1 --overwrite_output_dir"));
  expect_one_line_error(r, 2, "train_file '" + (out / "checkpoint-1" / "data.jsonl").string() + "' lies in");
  EXPECT_EQ(snapshot(out), before);

  fs::copy(out / "checkpoint-2", dir / "start", fs::copy_options::recursive);
  r = run_command(train(data, out, "--max_steps 1 --save_steps 1 --overwrite_output_dir", dir / "start"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(out / "checkpoint-2"));  // the earlier run's, removed
  EXPECT_TRUE(fs::exists(out / "checkpoint-1" / "fitsum_state.json"));
}

// `ulimit -f` killed a run at its first save (SIGXFSZ) with its history written and a temporary folder left; the
// rerun was refused ("already holds a training run", with a resume hint that could not work). Leftovers named for
// pid 1 (alive, and never fitsum) stayed for ever.
TEST(RunFolder, WhatAKilledRunLeftDoesNotBlockARerun) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("killed-run");
  const auto data = write_copy_task_records(dir / "eight.jsonl");
  const auto out = dir / "out";
  const auto killed =
      run_command("ulimit -f 64; exec " + train(data, out, "--max_steps 3 --save_steps 1 --logging_steps 1"));
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  ASSERT_TRUE(fs::exists(out / "trainer_state.json"));
  ASSERT_FALSE(fs::exists(out / "checkpoint-1"));
  fs::create_directories(out / ".checkpoint-7.tmp-1");
  write_bytes(out / ".checkpoint-7.tmp-1" / "model.safetensors", "partial");
  write_bytes(out / "model.safetensors.tmp-1", "partial");
  const auto r = run_command(train(data, out, "--max_steps 1 --save_steps 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fitsum: warning: output_dir '" + out.string() +
                          "' holds the trainer_state.json of an earlier run that saved no checkpoint and no model "
                          "(it reached step 1); this run writes over it"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("removed " + (out / ".checkpoint-7.tmp-1").string()), std::string::npos) << r.output;
  EXPECT_TRUE(leftovers(out).empty()) << leftovers(out).front();
  EXPECT_TRUE(fs::exists(out / "checkpoint-1" / "model.safetensors"));
  // A folder that holds checkpoints is still a run: refused, with the resume hint.
  const auto again = run_command(train(data, out, "--max_steps 1"));
  expect_one_line_error(again, 2, "already holds a training run (checkpoint folders); set overwrite_output_dir");
}

// Before: a regular file or a symbolic link loop as output_dir gave "filesystem error: status: Too many levels of
// symbolic links". Each is one line naming output_dir and what it is, before the data is read.
TEST(RunFolder, AnOutputDirThatIsNoFolderIsNamedInOneLine) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("not-a-folder");
  const auto data = write_copy_task_records(dir / "eight.jsonl");
  write_bytes(dir / "a-file", "x");
  fs::create_symlink("loop", dir / "loop");
  fs::create_symlink(dir / "nowhere", dir / "dangling");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  const std::vector<std::pair<fs::path, std::string>> cases = {
      {dir / "a-file", "' is a regular file, not a folder; remove it or choose another output_dir"},
      {dir / "loop", "' is a symbolic link loop (too many levels of symbolic links)"},
      {dir / "loop" / "out", "' cannot be created: '" + (dir / "loop").string() + "' is a symbolic link loop"},
      {dir / "dangling", "' is a symbolic link to '" + (dir / "nowhere").string() + "', which does not exist"},
      {dir / "fifo", "' is a FIFO, not a folder"},
      {dir / "a-file" / "out", "' cannot be created: '" + (dir / "a-file").string() + "' is a regular file"},
  };
  for (const auto& [output_dir, what] : cases) {
    const auto r = run_command(train(data, output_dir, "--max_steps 1"));
    expect_one_line_error(r, 1, "output_dir '" + output_dir.string() + what);
    EXPECT_EQ(r.output.find("train_file"), std::string::npos) << r.output;
  }
  EXPECT_TRUE(fs::is_regular_file(dir / "a-file"));
  EXPECT_FALSE(fs::exists(dir / "nowhere"));
}

// The other paths of the start-up that went through throwing std::filesystem calls: a --config_name or a model
// folder's generation_config.json that is a link loop printed "filesystem error: status: Too many levels of symbolic
// links"; a model folder that is one was said not to exist.
TEST(RunFolder, LinkLoopsAmongTheInputsAreNamedInOneLine) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("input-loops");
  const auto data = write_copy_task_records(dir / "eight.jsonl");
  fs::create_symlink("loop", dir / "loop");
  auto r = run_command(train(data, dir / "a", "--max_steps 1", dir / "loop"));
  expect_one_line_error(r, 1, "model folder '" + (dir / "loop").string() + "' is a symbolic link loop");
  r = run_command(fitsum_binary().string() + " train --config_name '" + (dir / "loop").string() + "' --train_file '" +
                  data.string() + "' --output_dir '" + (dir / "b").string() + "' --optim adafactor --max_steps 1");
  expect_one_line_error(r, 1, (dir / "loop").string() + "': its symbolic links form a loop");
  const auto model = dir / "model";
  fs::create_directories(model);
  for (const char* name : {"config.json", "model.safetensors"}) fs::copy_file(tiny_pegasus() / name, model / name);
  fs::create_symlink("generation_config.json", model / "generation_config.json");
  r = run_command(train(data, dir / "c", "--max_steps 1", model));
  expect_one_line_error(r, 1, "generation_config.json': its symbolic links form a loop");
  for (const char* out : {"a", "b", "c"}) EXPECT_FALSE(fs::exists(dir / out)) << out;
}

// Before: a run refused after its arguments were read (a missing data file, weights that do not load) had created
// output_dir already. The folder is created when the run starts.
TEST(RunFolder, ARefusedRunLeavesNoFolderBehind) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("no-folder");
  const auto data = write_copy_task_records(dir / "eight.jsonl");
  auto r = run_command(train(dir / "missing.jsonl", dir / "a" / "out", "--max_steps 1"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_FALSE(fs::exists(dir / "a"));
  fs::create_directories(dir / "damaged");
  fs::copy_file(tiny_pegasus() / "config.json", dir / "damaged" / "config.json");
  write_bytes(dir / "damaged" / "model.safetensors", "not a safetensors file");
  r = run_command(train(data, dir / "b" / "out", "--max_steps 1", dir / "damaged"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_FALSE(fs::exists(dir / "b"));
  r = run_command(train(data, dir / "c", "--max_steps 1 --do_eval"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(fs::exists(dir / "c"));
  // An existing folder keeps what it held, and no lock file is left in it.
  fs::create_directories(dir / "d");
  r = run_command(train(dir / "missing.jsonl", dir / "d", "--max_steps 1"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(fs::is_empty(dir / "d"));
  r = run_command(train(data, dir / "e" / "out", "--max_steps 1 --save_strategy no"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "e" / "out" / "model.safetensors"));
}

// Before: a BART checkpoint resumed into a PEGASUS run named the run's config as the checkpoint's and listed 177
// problems; AdamW's state resumed with --optim adafactor named a missing tensor; the run's folder given as the
// checkpoint could not read fitsum_state.json.
TEST(RunFolder, ResumesThatCannotWorkSayWhy) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("resumes");
  const auto data = write_copy_task_records(dir / "eight.jsonl");
  const auto bart = source_dir() / "tests" / "data" / "fixtures" / "tiny-bart";
  ASSERT_EQ(run_command(train(data, dir / "bart", "--max_steps 1 --save_steps 1", bart)).exit_code, 0);
  auto r = run_command(train(
      data, dir / "p", "--max_steps 2 --resume_from_checkpoint '" + (dir / "bart" / "checkpoint-1").string() + "'"));
  expect_one_line_error(r, 2,
                        "cannot resume from checkpoint '" + (dir / "bart" / "checkpoint-1").string() +
                            "': it is a bart model, this run is pegasus; resume from a checkpoint of this run's model");
  EXPECT_EQ(r.output.find("problem"), std::string::npos) << r.output;

  const auto adam = dir / "adam";
  ASSERT_EQ(run_command(train(data, adam, "--max_steps 1 --save_steps 1 --optim adamw_torch")).exit_code, 0);
  r = run_command(train(data, adam, "--max_steps 2 --resume_from_checkpoint latest"));  // --optim adafactor
  expect_one_line_error(r, 2,
                        "its optimizer state is adamw_torch's, this run's optimizer is adafactor; resume with "
                        "--optim adamw_torch");
  EXPECT_EQ(r.output.find("missing tensor"), std::string::npos) << r.output;

  r = run_command(
      train(data, adam, "--max_steps 2 --optim adamw_torch --resume_from_checkpoint '" + adam.string() + "'"));
  expect_one_line_error(r, 1,
                        "resume_from_checkpoint '" + adam.string() +
                            "' is a run's output folder, not a checkpoint; it holds checkpoint-1; resume from one of "
                            "them (--resume_from_checkpoint " +
                            (adam / "checkpoint-1").string() + "), or with --resume_from_checkpoint latest");
}

// Before: resuming at step 2 with --max_steps 1 reported 1e8 steps per second (2 steps over microseconds).
TEST(RunFolder, AResumeWithNothingLeftToTrainSaysSoAndReportsNoRate) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("nothing-left");
  const auto data = write_copy_task_records(dir / "eight.jsonl");
  const auto out = dir / "out";
  ASSERT_EQ(run_command(train(data, out, "--max_steps 2 --save_steps 2")).exit_code, 0);
  const auto r = run_command(train(data, out, "--max_steps 1 --resume_from_checkpoint latest"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nothing left to train: the run resumed at step 2 and max_steps is 1"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("done: 0 steps (from step 2 to 2) in "), std::string::npos) << r.output;
  const auto metrics = util::read_json_file(out / "train_results.json");
  EXPECT_EQ(metrics["train_steps_per_second"].get<double>(), 0.0) << metrics.dump();
  EXPECT_EQ(metrics["train_samples_per_second"].get<double>(), 0.0) << metrics.dump();
  EXPECT_EQ(metrics["train_tokens_per_second"].get<double>(), 0.0) << metrics.dump();
  EXPECT_LT(metrics["train_runtime"].get<double>(), 1.0) << metrics.dump();
  // A resumed run that trains reports its own steps' rate: 2 steps here, not 4 over 2 steps' time.
  const auto more = run_command(train(data, out, "--max_steps 4 --resume_from_checkpoint latest"));
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(more.output.find("done: 2 steps (from step 2 to 4) in "), std::string::npos) << more.output;
  const auto resumed = util::read_json_file(out / "train_results.json");
  const double runtime = resumed["train_runtime"].get<double>();
  EXPECT_NEAR(resumed["train_steps_per_second"].get<double>(), 2.0 / runtime, 0.01 * 2.0 / runtime) << resumed.dump();
}

}  // namespace
}  // namespace fitsum::test
