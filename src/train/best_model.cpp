// Implements include/fitsum/train/best_model.h.
#include "fitsum/train/best_model.h"

#include <algorithm>
#include <cmath>

namespace fitsum::train {

bool is_new_best(double value, std::optional<double> best, bool greater_is_better) {
  if (!best) return true;
  return greater_is_better ? value > *best : value < *best;
}

bool improves_for_early_stopping(double value, std::optional<double> best, bool greater_is_better, double threshold) {
  return is_new_best(value, best, greater_is_better) && (!best || std::abs(value - *best) > threshold);
}

std::vector<std::filesystem::path> checkpoints_to_remove(std::vector<std::filesystem::path> oldest_first,
                                                         const std::filesystem::path& best, std::int64_t limit) {
  if (limit <= 0 || static_cast<std::int64_t>(oldest_first.size()) <= limit) return {};
  const auto found = std::find(oldest_first.begin(), oldest_first.end(), best);
  const bool best_is_newest = !oldest_first.empty() && oldest_first.back() == best;
  if (found != oldest_first.end()) {
    // HF bubbles the best checkpoint up to the second-newest place; the newest stays where it is.
    auto index = static_cast<std::size_t>(found - oldest_first.begin());
    for (; index + 2 < oldest_first.size(); ++index) std::swap(oldest_first[index], oldest_first[index + 1]);
  }
  if (!best.empty() && limit == 1 && !best_is_newest) limit = 2;
  const auto remove = std::max<std::int64_t>(0, static_cast<std::int64_t>(oldest_first.size()) - limit);
  return {oldest_first.begin(), oldest_first.begin() + remove};
}

}  // namespace fitsum::train
