// The output folder of `fitsum train` before its run starts: what `output_dir` may name, what in it is an earlier
// run that a new one must not write over. Nothing here creates the folder or writes into it: a run refused at start-up
// leaves no folder behind (the run creates it with its lock, io/output_folder_lock.h).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fitsum/io/checkpoint_folders.h"
#include "fitsum/io/output_folder_lock.h"
#include "fitsum/train/training_job.h"

namespace fitsum::train {

namespace fs = std::filesystem;

// Checks what `output_dir` names without creating anything: an existing folder (or a link to one) that takes new
// files, or a path whose nearest existing folder does (the run creates the rest when it starts). Throws
// std::runtime_error in one line naming output_dir and what it is (a regular file, a FIFO, a symbolic link loop, a
// link to nothing, a path through a file, a folder that cannot be written). Returns the nearest existing folder:
// output_dir itself when it exists.
fs::path check_output_dir(const fs::path& output_dir);

// A new run (neither overwrite_output_dir nor a resume) into `output_dir`: throws std::invalid_argument when the
// folder holds an earlier run it would write over (checkpoint-N folders, or an old copy a re-save moved aside; the
// final model); returns the warning to give when it holds only the trainer_state.json of a run that died before
// saving anything (which this run writes over), else nothing. The lock file and what interrupted writes left
// (`.checkpoint-N.tmp-PID` folders, `NAME.tmp-PID` files) are no run: the run that takes the lock removes them.
std::optional<std::string> check_new_run_folder(const fs::path& output_dir);

// With overwrite_output_dir (without a resume) the earlier run's checkpoints are removed: throws
// std::invalid_argument naming the first of `inputs` (the model's folder, the data files) that lies in one of them.
void refuse_inputs_in_removed_checkpoints(const fs::path& output_dir, const std::vector<io::RunInput>& inputs);

// What the checks of a run's folder leave for the run: output_dir's lock when this process writes there and the folder
// existed (a run that holds it stops this one before anything is loaded), and the folder whose disk the run will write
// to.
struct CheckedOutputDir {
  std::shared_ptr<io::OutputFolderLock> lock;
  fs::path nearest_folder;
};

// `job`'s output_dir before anything is loaded: what it names (check_output_dir: nothing is created), whether another
// run holds it (the lock is taken here by the process that writes there: rank 0), and whether it holds an earlier run
// this one would write over (check_new_run_folder, whose warning goes to `warn`) or inputs an overwrite would remove
// (refuse_inputs_in_removed_checkpoints).
CheckedOutputDir check_run_folder(const TrainingJob& job, const std::function<void(const std::string&)>& warn);

// A run whose disk cannot take one checkpoint says so before the model loads, not at its first save hours later: the
// warning for `job` writing into `folder`'s file system, or nothing. Checkpoints carry the optimizer state unless
// save_strategy is "no" (then only the final model is saved); with optim auto the planner has not chosen yet, so the
// larger AdamW state is assumed.
std::optional<std::string> free_disk_warning_for(const TrainingJob& job, const fs::path& folder);

}  // namespace fitsum::train
