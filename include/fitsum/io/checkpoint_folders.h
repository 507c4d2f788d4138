// The checkpoint-N folders of an output folder, kept so that a reader never sees a partial one, whatever moment a
// process is killed at or a disk fails:
//   - a checkpoint is written into `.checkpoint-N.tmp-<pid>` and renamed into place (the commit point);
//   - a re-save of an existing step first moves the old copy aside to `.checkpoint-N.old-<pid>`, renames the new one
//     into place, and only then removes the old copy; a kill between the two renames is repaired at the next start
//     by moving the old copy back;
//   - pruning renames `checkpoint-N` to `.checkpoint-N.trash-<pid>` before removing it, so a half-deleted folder is
//     never visible under a checkpoint name;
//   - at start-up, what a dead process left (temporary, old and trash folders) is removed or restored, by the
//     process that holds the folder's lock (io/output_folder_lock.h): only it writes there, so everything it did not
//     make was left by a dead run, whatever pid its name carries.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fitsum::io {

namespace fs = std::filesystem;

class OutputFolderLock;

// "checkpoint-N" -> N; -1 for any other name.
std::int64_t checkpoint_step(const fs::path& dir);

// The optimizer state of a checkpoint: "optimizer.safetensors", or with the state sharded across processes (ZeRO
// stage 1) one file per process, "optimizer-00001-of-00004.safetensors" (`shard` counts from 0, the name from 1, as
// HF names model shards).
std::string optimizer_shard_name(int shard, int shards);
// The optimizer state files of `checkpoint`: the single file, or every shard. Throws std::runtime_error naming the
// folder when there is none, a shard is missing, or shards of different counts are mixed.
std::vector<fs::path> optimizer_state_files(const fs::path& checkpoint);

// The checkpoint-N folders of `output_dir`, by increasing N (none when the folder does not exist).
std::vector<fs::path> list_checkpoints(const fs::path& output_dir);

// Where checkpoint `step` of this process is written before commit_checkpoint (a fresh, empty folder).
fs::path begin_checkpoint(const fs::path& output_dir, std::int64_t step);

// Makes the folder written by begin_checkpoint visible as `output_dir/checkpoint-<step>`: fsyncs it, renames it into
// place (an existing copy is replaced only once the new one is in place) and fsyncs `output_dir`. Returns the path.
fs::path commit_checkpoint(const fs::path& temporary, std::int64_t step);

// Removes a checkpoint folder without it ever being visible half-deleted (rename to a trash name, then remove).
void remove_checkpoint(const fs::path& checkpoint);

// Removes what dead fitsum processes left in the locked folder (temporary and trash folders, the `NAME.tmp-PID`
// files of an interrupted atomic write; an old copy whose checkpoint-N is missing is moved back instead). A temporary
// file whose writer still holds a lock on it (another command writing into the folder) is left alone. Calls `report`
// with one line per folder or file handled.
void clean_stale_checkpoint_folders(const OutputFolderLock& lock,
                                    const std::function<void(const std::string&)>& report);

// A file or folder a run reads, and the argument that named it ("model_name_or_path 'out/checkpoint-2'").
struct RunInput {
  std::string argument;
  fs::path path;
};

// The `checkpoints` that are, or hold, one of `inputs` (symbolic links resolved), each with the first such input.
std::vector<std::pair<fs::path, RunInput>> checkpoints_holding(const std::vector<fs::path>& checkpoints,
                                                               const std::vector<RunInput>& inputs);

struct OutputFolderReport {
  std::function<void(const std::string&)> info;     // one line per folder or file handled
  std::function<void(const std::string&)> warning;  // a checkpoint kept against overwrite_output_dir
};

// Cleans what dead processes left in the locked output folder (above); with `discard_checkpoints` (a new run over an
// old one: overwrite_output_dir without a resume) also removes the old run's checkpoint-N folders, so that a later
// "resume latest" cannot continue the old run, except those holding one of `inputs`: what the run reads is never
// deleted (a warning names each one kept).
void prepare_output_folder(const OutputFolderLock& lock, bool discard_checkpoints, const std::vector<RunInput>& inputs,
                           const OutputFolderReport& report);

// Throws std::runtime_error naming `file` unless (epoch, step_in_epoch, global_step) is a position of a run with
// `steps_per_epoch` optimizer steps per epoch (a damaged fitsum_state.json must not index past an epoch's steps).
void check_checkpoint_position(const fs::path& file, std::int64_t epoch, std::int64_t step_in_epoch,
                               std::int64_t global_step, std::int64_t steps_per_epoch);

}  // namespace fitsum::io
