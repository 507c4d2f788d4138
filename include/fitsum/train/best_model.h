// Hugging Face's best-model rules as pure functions over numbers and folder names, so the trainer's loop stays a
// loop and the rules can be tested alone:
//  - a new best metric (Trainer._determine_best_metric): strictly better than the best so far, in the direction
//    greater_is_better says;
//  - EarlyStoppingCallback.check_metric_value: an evaluation improves only when it is better than the best so far
//    by more than early_stopping_threshold; `patience` evaluations in a row that do not stop the run;
//  - save_total_limit's rotation (Trainer._sorted_checkpoints / _rotate_checkpoints): the oldest checkpoints go
//    first, the best one is never removed (it is moved to the second-newest place before counting, and a limit of
//    1 keeps 2 while the best is not the newest).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

namespace fitsum::train {

// True when `value` is a new best over `best` (none yet: any value is).
bool is_new_best(double value, std::optional<double> best, bool greater_is_better);

// True when `value` improves on `best` by more than `threshold` (EarlyStoppingCallback; none yet: it does).
bool improves_for_early_stopping(double value, std::optional<double> best, bool greater_is_better, double threshold);

// The checkpoint folders (oldest first, as io::list_checkpoints returns them) that save_total_limit removes.
std::vector<std::filesystem::path> checkpoints_to_remove(std::vector<std::filesystem::path> oldest_first,
                                                         const std::filesystem::path& best, std::int64_t limit);

}  // namespace fitsum::train
