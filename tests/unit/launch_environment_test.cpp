// Where a process sits in a data-parallel job, read from each launcher's variables (train/distributed.h), and the
// one-line errors for a broken environment; a two-process all-reduce over a real rendezvous on 127.0.0.1.
#include <chrono>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/train/distributed.h"
#include "fitsum/train/local_launch.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

using Variables = std::map<std::string, std::string>;

train::LaunchEnvironment read(const Variables& vars) {
  return train::launch_environment([&vars](const char* name) -> const char* {
    const auto found = vars.find(name);
    return found == vars.end() ? nullptr : found->second.c_str();
  });
}

std::string error_of(const Variables& vars) {
  try {
    read(vars);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchEnvironment, NoLauncherIsOneProcess) {
  const auto env = read({});
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.rank, 0);
  EXPECT_FALSE(env.distributed());
  EXPECT_EQ(env.launcher, "none");
}

TEST(LaunchEnvironment, EachLaunchersVariables) {
  const Variables rendezvous = {{"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29500"}};
  const std::vector<std::pair<std::string, Variables>> cases = {
      {"torchrun", {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}}},
      {"openmpi",
       {{"OMPI_COMM_WORLD_RANK", "3"},
        {"OMPI_COMM_WORLD_SIZE", "4"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}},
      {"mpich", {{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}}},
      {"slurm", {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "2"}}},
  };
  for (auto [launcher, vars] : cases) {
    vars.insert(rendezvous.begin(), rendezvous.end());
    const auto env = read(vars);
    EXPECT_EQ(env.launcher, launcher);
    EXPECT_EQ(env.rank, 3) << launcher;
    EXPECT_EQ(env.world_size, 4) << launcher;
    EXPECT_EQ(env.local_rank, 1) << launcher;
    EXPECT_EQ(env.local_world_size, 2) << launcher;
    vars.erase(launcher == "torchrun"  ? "LOCAL_WORLD_SIZE"
               : launcher == "openmpi" ? "OMPI_COMM_WORLD_LOCAL_SIZE"
               : launcher == "mpich"   ? "MPI_LOCALNRANKS"
                                       : "SLURM_NTASKS_PER_NODE");
    EXPECT_EQ(read(vars).local_world_size, 1) << launcher;  // not said: this process alone
    EXPECT_EQ(env.master_addr, "node7") << launcher;
    EXPECT_EQ(env.master_port, 29500) << launcher;
    EXPECT_FALSE(env.agent_store) << launcher;
  }
}

TEST(LaunchEnvironment, TorchrunsVariablesWinOverTheBatchSystems) {
  // torchrun inside an srun allocation: the worker's own rank, not the Slurm task's.
  const auto env = read({{"RANK", "1"},
                         {"WORLD_SIZE", "2"},
                         {"SLURM_PROCID", "0"},
                         {"SLURM_NTASKS", "1"},
                         {"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", "1234"}});
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
}

TEST(LaunchEnvironment, TorchrunsAgentStore) {
  const auto env = read({{"RANK", "0"},
                         {"WORLD_SIZE", "2"},
                         {"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", "1234"},
                         {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                         {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_TRUE(env.agent_store);
  EXPECT_EQ(env.restart_count, 2);
}

TEST(LaunchEnvironment, OneProcessNeedsNoRendezvous) {
  const auto env = read({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_FALSE(env.distributed());
  EXPECT_TRUE(env.master_addr.empty());
}

TEST(LaunchEnvironment, BrokenVariablesAreNamed) {
  EXPECT_EQ(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), "RANK='x' is not a whole number from 0 to 1");
  EXPECT_EQ(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), "RANK='2' is not a whole number from 0 to 1");
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), "WORLD_SIZE='0' is not a whole number from 1 to 1048576");
  EXPECT_EQ(error_of({{"RANK", "1"}}), "WORLD_SIZE is not set");
  EXPECT_EQ(error_of({{"WORLD_SIZE", "2"}}), "RANK is not set");
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}),
            "WORLD_SIZE=2 but MASTER_ADDR is not set: export MASTER_ADDR and MASTER_PORT (the host and port of rank "
            "0's rendezvous), as torchrun does");
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
            "MASTER_PORT='70000' is not a whole number from 1 to 65535");
  EXPECT_EQ(error_of({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2 "}}),
            "SLURM_NTASKS='2 ' is not a whole number from 1 to 1048576");
}

// Two threads of this process as the two ranks of a job: a real TCPStore rendezvous and Gloo all-reduce.
TEST(ProcessGroup, TwoRanksSumOverARealRendezvous) {
  std::vector<double> sums(2), flags(2);
  const auto errors = on_two_ranks(
      [&](int r, std::shared_ptr<train::ProcessGroup> group) {
        auto t = torch::full({3}, static_cast<double>(r + 1), torch::kFloat);
        group->all_reduce_sum(t);
        sums[r] = t.sum().item<double>();
        flags[r] = group->any(r == 1) ? 1.0 : 0.0;
        group->barrier();
      },
      std::chrono::seconds(30));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(sums[r], 9.0) << "rank " << r;  // (1 + 2) x 3
    EXPECT_EQ(flags[r], 1.0) << "rank " << r;
  }
}

TEST(ProcessGroup, AMissingPeerIsAOneLineErrorWithinTheTimeout) {
  train::LaunchEnvironment env;
  env.rank = 0;
  env.world_size = 3;
  env.master_addr = "127.0.0.1";
  env.master_port = train::free_local_port();
  const auto start = std::chrono::steady_clock::now();
  try {
    train::ProcessGroup::connect(env, "gloo", std::chrono::seconds(2));
    FAIL() << "connected without its peers";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message,
              "rank 0 of 3 waited 2 s (ddp_timeout) at the rendezvous 127.0.0.1:" + std::to_string(env.master_port) +
                  ": ranks 1, 2 never arrived (1 of 3 processes joined); start every process of the job with "
                  "the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE=3, or raise --ddp_timeout");
  }
  // Before: the store's wait for its clients, then the process group's wait for their keys, each ddp_timeout long.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.5);
}

// Refused before any rendezvous: a backend that does not exist, nccl without NCCL in the build or on a CPU device.
TEST(ProcessGroup, BackendsThisBuildOrDeviceCannotRunAreRefused) {
  train::LaunchEnvironment env;
  const auto message = [&](const std::string& backend) {
    try {
      train::ProcessGroup::connect(env, backend, std::chrono::seconds(1));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message("mpi").find("'mpi' is not one of gloo, nccl"), std::string::npos) << message("mpi");
  const auto nccl = message("nccl");
  EXPECT_NE(nccl.find(train::nccl_available() ? "runs on CUDA devices" : "built without NCCL"), std::string::npos)
      << nccl;
  EXPECT_EQ(train::default_ddp_backend(c10::Device(c10::kCPU)), "gloo");
  EXPECT_EQ(train::default_ddp_backend(c10::Device(c10::kCUDA, 0)), train::nccl_available() ? "nccl" : "gloo");
}

}  // namespace
}  // namespace fitsum::test
