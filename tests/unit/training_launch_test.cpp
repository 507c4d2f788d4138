// train/training_launch.h: what `fitsum train` decides from how it was started.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "fitsum/train/training_launch.h"

namespace fitsum::train {
namespace {

LaunchEnvironment job_of(int world_size, int local_rank = 0, int local_world_size = 1) {
  LaunchEnvironment env;
  env.world_size = world_size;
  env.local_rank = local_rank;
  env.local_world_size = local_world_size;
  env.launcher = world_size > 1 ? "torchrun" : "none";
  return env;
}

TEST(TrainingLaunch, NprocPerNodeStartsProcessesOnlyWithoutALauncher) {
  EXPECT_FALSE(starts_local_processes(1, job_of(1)));
  EXPECT_TRUE(starts_local_processes(2, job_of(1)));
  EXPECT_FALSE(starts_local_processes(2, job_of(2)));  // one of the workers it started, or torchrun's
  EXPECT_FALSE(starts_local_processes(1, job_of(4)));
  try {
    starts_local_processes(2, job_of(4));
    FAIL() << "expected --nproc_per_node 2 inside a job of 4 to be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "--nproc_per_node 2 inside a job of 4 processes (torchrun): leave --nproc_per_node to runs without a "
              "launcher");
  }
}

TEST(TrainingLaunch, EachProcessTakesItsLocalRanksDeviceAndShareOfTheCores) {
  util::RuntimeOptions options;
  options.device = "cuda";
  const auto own = runtime_options_for(options, job_of(4, 3, 2));
  EXPECT_EQ(own.device, "cuda");
  EXPECT_EQ(own.local_rank, 3);
  EXPECT_EQ(own.local_processes, 2);
  const auto alone = runtime_options_for(options, job_of(1));
  EXPECT_EQ(alone.local_rank, 0);
  EXPECT_EQ(alone.local_processes, 1);
}

}  // namespace
}  // namespace fitsum::train
