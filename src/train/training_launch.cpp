// Implements include/fitsum/train/training_launch.h.
#include "fitsum/train/training_launch.h"

#include <stdexcept>
#include <string>

namespace fitsum::train {

bool starts_local_processes(int nproc_per_node, const LaunchEnvironment& environment) {
  if (nproc_per_node <= 1) return false;
  if (!environment.distributed()) return true;
  if (environment.world_size != nproc_per_node) {
    throw std::invalid_argument("--nproc_per_node " + std::to_string(nproc_per_node) + " inside a job of " +
                                std::to_string(environment.world_size) + " processes (" + environment.launcher +
                                "): leave --nproc_per_node to runs without a launcher");
  }
  return false;
}

util::RuntimeOptions runtime_options_for(util::RuntimeOptions options, const LaunchEnvironment& environment) {
  options.local_rank = environment.local_rank;
  options.local_processes = environment.local_world_size;
  return options;
}

}  // namespace fitsum::train
