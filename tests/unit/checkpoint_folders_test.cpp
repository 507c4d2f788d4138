// Checkpoint folders never visible partial: commits are renames, a re-save keeps the old copy until the new one is
// in place, pruning renames to a trash name first, and what a killed process left is removed (or, for an old copy
// whose checkpoint is missing, moved back) at the next start. The kill moments are laid out by hand here; the kill -9
// soak (tests/slow) checks the same at random moments of real runs.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>

#include <gtest/gtest.h>

#include "fitsum/io/checkpoint_folders.h"
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

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
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
  io::clean_stale_checkpoint_folders(out, [&](const std::string& line) { lines.push_back(line); });
  EXPECT_EQ(names_in(out), std::vector<std::string>{"checkpoint-4"});
  EXPECT_EQ(text_of(out / "checkpoint-4" / "model.safetensors"), "old and complete");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("restored"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("removed"), std::string::npos) << lines[1];
}

TEST(CheckpointFolders, StaleTemporaryAndTrashFoldersAreRemovedButALiveProcessKeepsItsOwn) {
  const auto out = temp_dir("stale");
  const long dead = dead_pid();
  const long alive = static_cast<long>(::getppid());
  folder_with(out / "checkpoint-2", "kept");
  folder_with(out / (".checkpoint-3.tmp-" + std::to_string(dead)), "partial");
  folder_with(out / (".checkpoint-1.trash-" + std::to_string(dead)), "half deleted");
  folder_with(out / (".checkpoint-2.old-" + std::to_string(dead)), "superseded");  // checkpoint-2 exists
  folder_with(out / (".checkpoint-5.tmp-" + std::to_string(alive)), "being written");
  std::vector<std::string> lines;
  io::clean_stale_checkpoint_folders(out, [&](const std::string& line) { lines.push_back(line); });
  EXPECT_EQ(names_in(out), (std::vector<std::string>{".checkpoint-5.tmp-" + std::to_string(alive), "checkpoint-2"}));
  EXPECT_EQ(text_of(out / "checkpoint-2" / "model.safetensors"), "kept");
  EXPECT_EQ(lines.size(), 3u);
}

// A kill while the final model or trainer_state.json was written into the output folder leaves the atomic writer's
// `NAME.tmp-PID` (found by the kill -9 soak); the next start removes it, but not a live writer's or a user's file.
TEST(CheckpointFolders, AStaleAtomicWriteTemporaryIsRemovedAtTheNextStart) {
  const auto out = temp_dir("stale-files");
  const long dead = dead_pid();
  const long alive = static_cast<long>(::getppid());
  write_bytes(out / "trainer_state.json", "{}");
  write_bytes(out / ("trainer_state.json.tmp-" + std::to_string(dead)), "{\"log_hi");
  write_bytes(out / ("model.safetensors.tmp-" + std::to_string(alive)), "being written");
  write_bytes(out / "notes.tmp-x", "a user's file");
  std::vector<std::string> lines;
  io::clean_stale_checkpoint_folders(out, [&](const std::string& line) { lines.push_back(line); });
  EXPECT_EQ(names_in(out), (std::vector<std::string>{"model.safetensors.tmp-" + std::to_string(alive), "notes.tmp-x",
                                                     "trainer_state.json"}));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("trainer_state.json.tmp-" + std::to_string(dead)), std::string::npos) << lines[0];
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
  io::prepare_output_folder(out, /*discard_checkpoints=*/false, nullptr);
  EXPECT_EQ(io::list_checkpoints(out).size(), 2u);
  io::prepare_output_folder(out, /*discard_checkpoints=*/true, nullptr);
  EXPECT_TRUE(io::list_checkpoints(out).empty());
  EXPECT_TRUE(names_in(out).empty());
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
