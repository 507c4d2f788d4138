// Implements include/fitsum/io/checkpoint_folders.h with renames inside one folder (atomic on POSIX file systems)
// and fsyncs of the files, the checkpoint folder and the output folder around each commit.
#include "fitsum/io/checkpoint_folders.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <regex>
#include <stdexcept>
#include <system_error>

#include "fitsum/io/output_folder_lock.h"
#include "fitsum/util/files.h"

namespace fitsum::io {

namespace {

// A folder this module names while it works: .checkpoint-<step>.<kind>-<pid>.
struct WorkFolder {
  std::int64_t step = -1;
  std::string kind;  // tmp, old or trash
  long pid = 0;
};

bool parse_work_folder(const std::string& name, WorkFolder& out) {
  static const std::regex pattern(R"(\.checkpoint-([0-9]{1,18})\.(tmp|old|trash)-([0-9]{1,9}))");
  std::smatch match;
  if (!std::regex_match(name, match, pattern)) return false;
  out.step = std::stoll(match[1]);
  out.kind = match[2];
  out.pid = std::stol(match[3]);
  return true;
}

fs::path work_folder(const fs::path& output_dir, std::int64_t step, const char* kind) {
  return output_dir / (".checkpoint-" + std::to_string(step) + "." + kind + "-" + std::to_string(::getpid()));
}

void fsync_file(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open '" + file.string() + "' to sync it: " + std::strerror(errno));
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0) {
    throw std::runtime_error("cannot sync '" + file.string() + "' to disk: " + std::strerror(error) +
                             "; check the disk (full, read-only or failing)");
  }
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  std::error_code error;
  fs::rename(from, to, error);
  if (error) {
    throw std::runtime_error("cannot rename '" + from.string() + "' to '" + to.string() + "': " + error.message() +
                             "; check the output folder's disk (full, read-only or failing)");
  }
}

}  // namespace

std::int64_t checkpoint_step(const fs::path& dir) {
  static const std::regex pattern("checkpoint-([0-9]{1,18})");
  std::smatch match;
  const std::string name = dir.filename().string();
  if (std::regex_match(name, match, pattern)) return std::stoll(match[1]);
  return -1;
}

std::vector<fs::path> list_checkpoints(const fs::path& output_dir) {
  std::vector<fs::path> found;
  std::error_code error;
  if (!fs::is_directory(output_dir, error)) return found;
  for (fs::directory_iterator it(output_dir, error), end; !error && it != end; it.increment(error)) {
    std::error_code kind;
    if (it->is_directory(kind) && checkpoint_step(it->path()) >= 0) found.push_back(it->path());
  }
  if (error) {
    throw std::runtime_error("cannot list the checkpoints in '" + output_dir.string() + "': " + error.message() +
                             "; check the folder's permissions");
  }
  std::sort(found.begin(), found.end(),
            [](const fs::path& a, const fs::path& b) { return checkpoint_step(a) < checkpoint_step(b); });
  return found;
}

std::string optimizer_shard_name(int shard, int shards) {
  char name[64];
  std::snprintf(name, sizeof name, "optimizer-%05d-of-%05d.safetensors", shard + 1, shards);
  return name;
}

std::vector<fs::path> optimizer_state_files(const fs::path& checkpoint) {
  if (fs::exists(checkpoint / "optimizer.safetensors")) return {checkpoint / "optimizer.safetensors"};
  int shards = 0;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(checkpoint, error)) {
    int index = 0, count = 0;
    char tail[32] = {0};
    const auto name = entry.path().filename().string();
    if (std::sscanf(name.c_str(), "optimizer-%5d-of-%5d.%31s", &index, &count, tail) != 3 ||
        std::string(tail) != "safetensors" || name != optimizer_shard_name(index - 1, count)) {
      continue;
    }
    if (shards != 0 && count != shards) {
      throw std::runtime_error("checkpoint '" + checkpoint.string() + "' mixes optimizer shards of " +
                               std::to_string(shards) + " and " + std::to_string(count) + " processes");
    }
    shards = count;
  }
  if (shards == 0) {
    throw std::runtime_error("checkpoint '" + checkpoint.string() +
                             "' has no optimizer state (optimizer.safetensors or optimizer-00001-of-N.safetensors)");
  }
  std::vector<fs::path> files;
  for (int i = 0; i < shards; ++i) {
    files.push_back(checkpoint / optimizer_shard_name(i, shards));
    if (!fs::exists(files.back())) {
      throw std::runtime_error("checkpoint '" + checkpoint.string() + "' lacks " + files.back().filename().string() +
                               " (optimizer shard " + std::to_string(i + 1) + " of " + std::to_string(shards) + ")");
    }
  }
  return files;
}

fs::path begin_checkpoint(const fs::path& output_dir, std::int64_t step) {
  const auto temporary = work_folder(output_dir, step, "tmp");
  fs::remove_all(temporary);
  fs::create_directories(temporary);
  return temporary;
}

fs::path commit_checkpoint(const fs::path& temporary, std::int64_t step) {
  const fs::path output_dir = temporary.parent_path();
  const fs::path final_dir = output_dir / ("checkpoint-" + std::to_string(step));
  for (const auto& entry : fs::directory_iterator(temporary)) {
    if (entry.is_regular_file()) fsync_file(entry.path());
  }
  util::fsync_directory(temporary);
  std::error_code error;
  if (!fs::exists(fs::symlink_status(final_dir, error))) {
    rename_or_throw(temporary, final_dir);  // the commit point
    util::fsync_directory(output_dir);
    return final_dir;
  }
  // A re-save: the old copy stays whole (under another name) until the new one is in place.
  const auto old = work_folder(output_dir, step, "old");
  fs::remove_all(old, error);
  rename_or_throw(final_dir, old);
  rename_or_throw(temporary, final_dir);
  util::fsync_directory(output_dir);
  fs::remove_all(old, error);  // what a failure leaves is removed at the next start
  return final_dir;
}

void remove_checkpoint(const fs::path& checkpoint) {
  const std::int64_t step = checkpoint_step(checkpoint);
  const fs::path trash = work_folder(checkpoint.parent_path(), std::max<std::int64_t>(step, 0), "trash");
  std::error_code error;
  fs::remove_all(trash, error);
  rename_or_throw(checkpoint, trash);
  util::fsync_directory(checkpoint.parent_path());
  fs::remove_all(trash, error);  // what a failure leaves is removed at the next start
}

namespace {

// util::AtomicFileWriter's temporaries, `NAME.tmp-PID`, whose writer died before its rename (a kill while the final
// model or trainer_state.json was written into the output folder). No training run writes here but the lock's
// holder; a temporary another command is still writing (`fitsum eval --predictions_file` into this folder) is left
// alone while its writer holds a lock on it. The pid in the name says nothing: pids are reused (pid 1 in a container).
void remove_stale_temporary_files(const fs::path& output_dir, const std::function<void(const std::string&)>& report) {
  static const std::regex pattern(R"(.+\.tmp-([0-9]{1,9}))");
  std::error_code error;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(output_dir, error)) {
    const auto name = entry.path().filename().string();
    if (std::regex_match(name, pattern) && fs::is_regular_file(entry.symlink_status(error)) &&
        !util::held_by_live_writer(entry.path())) {
      stale.push_back(entry.path());
    }
  }
  for (const auto& path : stale) {
    const bool removed = fs::remove(path, error);
    if (report) {
      report(removed ? "removed " + path.string() + " left by an interrupted write"
                     : "could not remove " + path.string() + " left by an interrupted write: " + error.message());
    }
  }
}

// Whether `path` is `folder` or lies inside it, symbolic links resolved.
bool lies_inside(const fs::path& path, const fs::path& folder) {
  std::error_code error;
  const auto inner = fs::weakly_canonical(fs::absolute(path, error), error);
  if (error) return false;
  const auto outer = fs::weakly_canonical(fs::absolute(folder, error), error);
  if (error) return false;
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty() && std::next(o) == outer.end()) break;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

}  // namespace

void clean_stale_checkpoint_folders(const OutputFolderLock& lock,
                                    const std::function<void(const std::string&)>& report) {
  const fs::path& output_dir = lock.folder();
  std::error_code error;
  if (!fs::is_directory(output_dir, error)) return;
  remove_stale_temporary_files(output_dir, report);
  // Only the lock's holder makes work folders (the other processes of a data-parallel job write into the holder's
  // temporary folder), so under the lock every one belongs to a dead run, whatever pid its name carries.
  std::vector<std::pair<fs::path, WorkFolder>> stale;
  for (const auto& entry : fs::directory_iterator(output_dir, error)) {
    WorkFolder folder;
    if (parse_work_folder(entry.path().filename().string(), folder)) stale.emplace_back(entry.path(), folder);
  }
  // Old copies first: one whose checkpoint-N is missing was moved aside by a re-save killed before its second
  // rename, and is the complete checkpoint.
  std::stable_sort(stale.begin(), stale.end(),
                   [](const auto& a, const auto& b) { return (a.second.kind == "old") > (b.second.kind == "old"); });
  for (const auto& [path, folder] : stale) {
    const fs::path final_dir = output_dir / ("checkpoint-" + std::to_string(folder.step));
    if (folder.kind == "old" && !fs::exists(fs::symlink_status(final_dir, error))) {
      rename_or_throw(path, final_dir);
      util::fsync_directory(output_dir);
      if (report) report("restored " + final_dir.string() + " (a re-save of it was interrupted)");
      continue;
    }
    const auto removed = fs::remove_all(path, error);
    if (report) {
      report(error
                 ? "could not remove " + path.string() + " left by an interrupted save: " + error.message()
                 : "removed " + path.string() + " left by an interrupted save (" + std::to_string(removed) + " files)");
    }
  }
}

std::vector<std::pair<fs::path, RunInput>> checkpoints_holding(const std::vector<fs::path>& checkpoints,
                                                               const std::vector<RunInput>& inputs) {
  std::vector<std::pair<fs::path, RunInput>> found;
  for (const auto& checkpoint : checkpoints) {
    for (const auto& input : inputs) {
      if (input.path.empty() || !lies_inside(input.path, checkpoint)) continue;
      found.emplace_back(checkpoint, input);
      break;
    }
  }
  return found;
}

// A checkpoint's position must be one this run can reach: a damaged or edited fitsum_state.json would index past the
// epoch's steps (a negative step_in_epoch crashed) or silently skip the data (10^12).
void check_checkpoint_position(const fs::path& file, std::int64_t epoch, std::int64_t step_in_epoch,
                               std::int64_t global_step, std::int64_t steps_per_epoch) {
  std::int64_t expected = 0;
  const bool consistent = epoch >= 0 && step_in_epoch >= 0 && step_in_epoch <= steps_per_epoch &&
                          !__builtin_mul_overflow(epoch, steps_per_epoch, &expected) &&
                          !__builtin_add_overflow(expected, step_in_epoch, &expected) && expected == global_step;
  if (!consistent) {
    throw std::runtime_error("cannot resume from '" + file.string() + "': epoch " + std::to_string(epoch) +
                             ", step_in_epoch " + std::to_string(step_in_epoch) + " and global_step " +
                             std::to_string(global_step) + " are not a position of this run (" +
                             std::to_string(steps_per_epoch) +
                             " steps per epoch); the file is damaged, resume from another checkpoint");
  }
}

void prepare_output_folder(const OutputFolderLock& lock, bool discard_checkpoints, const std::vector<RunInput>& inputs,
                           const OutputFolderReport& report) {
  clean_stale_checkpoint_folders(lock, report.info);
  if (!discard_checkpoints) return;
  const auto old = list_checkpoints(lock.folder());
  const auto kept = checkpoints_holding(old, inputs);
  for (const auto& checkpoint : old) {
    const auto read = std::find_if(kept.begin(), kept.end(), [&](const auto& k) { return k.first == checkpoint; });
    if (read != kept.end()) {
      if (report.warning) {
        report.warning("overwrite_output_dir keeps " + checkpoint.string() + " of the earlier run: this run reads " +
                       read->second.argument + " '" + read->second.path.string() +
                       "' from it (the earlier run's other checkpoints are removed)");
      }
      continue;
    }
    remove_checkpoint(checkpoint);
    if (report.info) report.info("removed " + checkpoint.string() + " of the earlier run (overwrite_output_dir)");
  }
}

}  // namespace fitsum::io
