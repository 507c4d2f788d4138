// The lock of a training run's output folder: `output_dir/.fitsum.lock`, held with flock(2) for the whole run by the
// one process that writes there (a single process, or rank 0 of a data-parallel job) and holding that process's
// pid. A second `fitsum train` into the same folder fails at once naming the holder, instead of both runs pruning
// each other's checkpoints. The kernel releases the lock when its holder dies however it dies, so a folder whose lock
// can be taken has no live writer: whatever work folder or temporary file a run left there belongs to a dead run
// (io/checkpoint_folders.h cleans them under the lock). Readers (`fitsum eval` on `output_dir/checkpoint-N`) need
// no lock: checkpoints only ever appear and disappear by rename.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

namespace fitsum::io {

namespace fs = std::filesystem;

inline constexpr const char* kOutputFolderLockName = ".fitsum.lock";

// Another process holds the folder's lock; what() names the folder and that process.
class OutputFolderBusy : public std::runtime_error {
 public:
  OutputFolderBusy(const std::string& message, long holder_pid) : std::runtime_error(message), pid_(holder_pid) {}
  long holder_pid() const { return pid_; }  // 0 when the lock file does not say

 private:
  long pid_;
};

class OutputFolderLock {
 public:
  // Creates `output_dir` when it is missing and takes its lock without waiting. Throws OutputFolderBusy when another
  // process holds it, std::runtime_error naming the folder when it cannot be created or locked.
  explicit OutputFolderLock(const fs::path& output_dir);
  // Removes the lock file (while still holding the lock, so that no other process can hold a lock on the removed
  // file), then releases the lock.
  ~OutputFolderLock();
  OutputFolderLock(const OutputFolderLock&) = delete;
  OutputFolderLock& operator=(const OutputFolderLock&) = delete;

  const fs::path& folder() const { return folder_; }

 private:
  fs::path folder_;
  fs::path file_;
  int fd_ = -1;
};

}  // namespace fitsum::io
