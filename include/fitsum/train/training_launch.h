// What `fitsum train` decides from how it was started (train/distributed.h's LaunchEnvironment, read from torchrun's,
// Open MPI's, MPICH's or Slurm's variables): whether it starts --nproc_per_node processes itself
// (train/local_launch.h), and the device and share of the machine's cores that each process of a job takes.
#pragma once

#include "fitsum/train/distributed.h"
#include "fitsum/util/runtime.h"

namespace fitsum::train {

// True when this process starts the `nproc_per_node` workers itself and waits for them: N > 1 without a launcher.
// Under a launcher (or in one of those workers) each process trains itself (false), and N must then be the job's
// size: throws std::invalid_argument otherwise.
bool starts_local_processes(int nproc_per_node, const LaunchEnvironment& environment);

// `options` for a process of `environment`: its CUDA device is its LOCAL_RANK's, and the job's processes on this
// machine (LOCAL_WORLD_SIZE and its kin) share its cores.
util::RuntimeOptions runtime_options_for(util::RuntimeOptions options, const LaunchEnvironment& environment);

}  // namespace fitsum::train
