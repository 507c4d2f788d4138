// Checkpoint folders never visible partial: commits are renames, a re-save keeps the old copy until the new one is
// in place, pruning renames to a trash name first, and what a killed process left is removed (or, for an old copy
// whose checkpoint is missing, moved back) at the next start. The kill moments are laid out by hand here; the kill -9
// soak (tests/slow) checks the same at random moments of real runs.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>

#include <gtest/gtest.h>

#include "fitsum/io/checkpoint_folders.h"
#include "fitsum/io/output_folder_lock.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

std::string text_of(const fs::path& file) {
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A pid that belonged to a process which has ended.
long dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

fs::path folder_with(const fs::path& dir, const std::string& content) {
  fs::create_directories(dir);
  write_bytes(dir / "model.safetensors", content);
  return dir;
}

// The names in `dir`, without the lock file of a test that holds the folder's lock.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename() != io::kOutputFolderLockName) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CheckpointFolders, ACommitIsARenameOfTheTemporaryFolder) {
  const auto out = temp_dir("commit");
  const auto temporary = io::begin_checkpoint(out, 7);
  EXPECT_EQ(temporary.filename().string().rfind(".checkpoint-7.tmp-", 0), 0u);
  write_bytes(temporary / "model.safetensors", "new");
  EXPECT_EQ(io::commit_checkpoint(temporary, 7).string(), (out / "checkpoint-7").string());
  EXPECT_EQ(names_in(out), std::vector<std::string>{"checkpoint-7"});
  EXPECT_EQ(text_of(out / "checkpoint-7" / "model.safetensors"), "new");
}

TEST(CheckpointFolders, AReSaveReplacesTheOldCopyOnlyOnceTheNewOneIsInPlace) {
  const auto out = temp_dir("resave");
  folder_with(out / "checkpoint-3", "old");
  const auto temporary = io::begin_checkpoint(out, 3);
  write_bytes(temporary / "model.safetensors", "new");
  io::commit_checkpoint(temporary, 3);
  EXPECT_EQ(names_in(out), std::vector<std::string>{"checkpoint-3"});
  EXPECT_EQ(text_of(out / "checkpoint-3" / "model.safetensors"), "new");
}

TEST(CheckpointFolders, AReSaveKilledBetweenItsRenamesIsRepairedAtTheNextStart) {
  // The old copy was moved aside, the new one not yet renamed into place: the old copy is the checkpoint.
  const auto out = temp_dir("repair");
  const long pid = dead_pid();
  folder_with(out / (".checkpoint-4.old-" + std::to_string(pid)), "old and complete");
  folder_with(out / (".checkpoint-4.tmp-" + std::to_string(pid)), "new, maybe incomplete");
  std::vector<std::string> lines;
  io::clean_stale_checkpoint_folders(io::OutputFolderLock(out),
                                     [&](const std::string& line) { lines.push_back(line); });
  EXPECT_EQ(names_in(out), std::vector<std::string>{"checkpoint-4"});
  EXPECT_EQ(text_of(out / "checkpoint-4" / "model.safetensors"), "old and complete");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("restored"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("removed"), std::string::npos) << lines[1];
}

// Under the folder's lock no other training run writes there, so every work folder is a dead run's, whatever pid its
// name carries: one named for pid 1 (alive in every container, and never fitsum) used to stay for ever.
TEST(CheckpointFolders, UnderTheLockEveryWorkFolderIsADeadRunsWhateverPidItNames) {
  const auto out = temp_dir("stale");
  const long dead = dead_pid();
  const long alive = static_cast<long>(::getppid());
  folder_with(out / "checkpoint-2", "kept");
  folder_with(out / (".checkpoint-3.tmp-" + std::to_string(dead)), "partial");
  folder_with(out / (".checkpoint-1.trash-" + std::to_string(dead)), "half deleted");
  folder_with(out / (".checkpoint-2.old-" + std::to_string(dead)), "superseded");  // checkpoint-2 exists
  folder_with(out / (".checkpoint-5.tmp-" + std::to_string(alive)), "left by a killed run whose pid was reused");
  folder_with(out / ".checkpoint-6.tmp-1", "left by a killed run that was pid 1 in its container");
  std::vector<std::string> lines;
  io::clean_stale_checkpoint_folders(io::OutputFolderLock(out),
                                     [&](const std::string& line) { lines.push_back(line); });
  EXPECT_EQ(names_in(out), std::vector<std::string>{"checkpoint-2"});
  EXPECT_EQ(text_of(out / "checkpoint-2" / "model.safetensors"), "kept");
  EXPECT_EQ(lines.size(), 5u);
}

// A kill while the final model or trainer_state.json was written into the output folder leaves the atomic writer's
// `NAME.tmp-PID` (found by the kill -9 soak); the next start removes it, whatever pid it names (pid 1 is alive), but
// not a temporary whose writer holds a lock on it (another command writing into the folder) nor a user's file.
TEST(CheckpointFolders, AStaleAtomicWriteTemporaryIsRemovedAtTheNextStart) {
  const auto out = temp_dir("stale-files");
  const long dead = dead_pid();
  write_bytes(out / "trainer_state.json", "{}");
  write_bytes(out / ("trainer_state.json.tmp-" + std::to_string(dead)), "{\"log_hi");
  write_bytes(out / "model.safetensors.tmp-1", "left by a killed writer that was pid 1");
  write_bytes(out / "predictions.jsonl.tmp-77", "being written");
  write_bytes(out / "notes.tmp-x", "a user's file");
  const int writer = ::open((out / "predictions.jsonl.tmp-77").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(writer, 0);
  ASSERT_EQ(::flock(writer, LOCK_EX), 0);
  std::vector<std::string> lines;
  io::clean_stale_checkpoint_folders(io::OutputFolderLock(out),
                                     [&](const std::string& line) { lines.push_back(line); });
  ::close(writer);
  EXPECT_EQ(names_in(out), (std::vector<std::string>{"notes.tmp-x", "predictions.jsonl.tmp-77", "trainer_state.json"}));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(".tmp-"), std::string::npos) << lines[0];
}

TEST(CheckpointFolders, PruningNeverLeavesAHalfDeletedCheckpointVisible) {
  const auto out = temp_dir("prune");
  folder_with(out / "checkpoint-1", "a");
  folder_with(out / "checkpoint-2", "b");
  io::remove_checkpoint(out / "checkpoint-1");
  EXPECT_EQ(names_in(out), std::vector<std::string>{"checkpoint-2"});
  const auto listed = io::list_checkpoints(out);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].string(), (out / "checkpoint-2").string());
}

TEST(CheckpointFolders, OverwritingAnOutputFolderRemovesTheOldRunsCheckpoints) {
  // Otherwise "resume latest" after an overwrite would continue the old run.
  const auto out = temp_dir("overwrite");
  folder_with(out / "checkpoint-10", "old run");
  folder_with(out / "checkpoint-20", "old run");
  {
    const io::OutputFolderLock lock(out);
    io::prepare_output_folder(lock, /*discard_checkpoints=*/false, {}, {});
    EXPECT_EQ(io::list_checkpoints(out).size(), 2u);
    io::prepare_output_folder(lock, /*discard_checkpoints=*/true, {}, {});
    EXPECT_TRUE(io::list_checkpoints(out).empty());
  }
  EXPECT_TRUE(fs::is_empty(out));  // the lock file goes with the lock
}

// `--model_name_or_path out/checkpoint-2 --output_dir out --overwrite_output_dir` deleted the checkpoint the run
// starts from (and copies its tokenizer from at every save); the same for a data file inside a checkpoint.
TEST(CheckpointFolders, OverwritingKeepsTheCheckpointsTheRunReadsWithAWarning) {
  const auto out = temp_dir("overwrite-inputs");
  folder_with(out / "checkpoint-1", "old run");
  folder_with(out / "checkpoint-2", "the new run's model");
  folder_with(out / "checkpoint-3", "old run");
  folder_with(out / "checkpoint-4", "old run");
  write_bytes(out / "checkpoint-3" / "data.jsonl", "{}");
  fs::create_directory_symlink(out / "checkpoint-4", out / "link");
  const std::vector<io::RunInput> inputs = {{"the model", out / "checkpoint-2"},
                                            {"train_file", out / "checkpoint-3" / "data.jsonl"},
                                            {"the tokenizer", out / "link"},
                                            {"test_file", out / "other.jsonl"},
                                            {"validation_file", ""}};
  std::vector<std::string> warnings;
  std::vector<std::string> removed;
  io::prepare_output_folder(io::OutputFolderLock(out), /*discard_checkpoints=*/true, inputs,
                            {[&](const std::string& line) { removed.push_back(line); },
                             [&](const std::string& line) { warnings.push_back(line); }});
  EXPECT_EQ(names_in(out), (std::vector<std::string>{"checkpoint-2", "checkpoint-3", "checkpoint-4", "link"}));
  EXPECT_EQ(text_of(out / "checkpoint-2" / "model.safetensors"), "the new run's model");
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_NE(warnings[0].find("keeps " + (out / "checkpoint-2").string() +
                             " of the earlier run: this run reads the model '" + (out / "checkpoint-2").string() + "'"),
            std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[1].find("train_file"), std::string::npos) << warnings[1];
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_NE(removed[0].find("checkpoint-1"), std::string::npos) << removed[0];
}

// Two processes into one output folder: the second is refused at once, naming the first's pid; the lock goes with
// its holder, however it ends.
TEST(OutputFolderLock, ASecondHolderIsRefusedNamingTheFirstsPid) {
  const auto out = temp_dir("lock") / "out";
  {
    const io::OutputFolderLock first(out);  // creates the missing folder
    EXPECT_TRUE(fs::exists(out / io::kOutputFolderLockName));
    try {
      const io::OutputFolderLock second(out);
      ADD_FAILURE() << "a second lock was taken";
    } catch (const io::OutputFolderBusy& e) {
      EXPECT_EQ(e.holder_pid(), static_cast<long>(::getpid()));
      EXPECT_NE(std::string(e.what()).find("output_dir '" + out.string() + "' is in use by another training run (pid " +
                                           std::to_string(::getpid())),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(out / io::kOutputFolderLockName));
  // A holder killed with SIGKILL leaves its lock file, but not its lock.
  const pid_t child = ::fork();
  if (child == 0) {
    const io::OutputFolderLock held(out);
    ::kill(::getpid(), SIGKILL);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(fs::exists(out / io::kOutputFolderLockName));
  EXPECT_NO_THROW(io::OutputFolderLock again(out));
}

TEST(CheckpointFolders, APositionOutsideTheRunIsRefused) {
  // 10 steps per epoch: (epoch 2, step 3) is global step 23.
  EXPECT_NO_THROW(io::check_checkpoint_position("fitsum_state.json", 2, 3, 23, 10));
  EXPECT_NO_THROW(io::check_checkpoint_position("fitsum_state.json", 0, 10, 10, 10));  // saved at an epoch's end
  for (const auto& [epoch, step_in_epoch, global_step] : std::vector<std::array<std::int64_t, 3>>{
           {0, -7, -7}, {0, 1000000000000, 1000000000000}, {-1, 3, -7}, {2, 3, 24}}) {
    try {
      io::check_checkpoint_position("ckpt/fitsum_state.json", epoch, step_in_epoch, global_step, 10);
      ADD_FAILURE() << "accepted step_in_epoch " << step_in_epoch;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("ckpt/fitsum_state.json"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("step_in_epoch " + std::to_string(step_in_epoch)), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace fitsum::test
