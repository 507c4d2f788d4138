// Data-parallel training across processes: where a process sits in the job (what its launcher told it through the
// environment) and the communication between the processes, which is LibTorch's c10d (ProcessGroupGloo over a
// TCPStore rendezvous), the engine PyTorch's own DDP runs on. Nothing here knows of models or the trainer: it moves
// tensors and agrees on flags.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <c10/core/Device.h>
#include <torch/types.h>

namespace fitsum::train {

// The process's place in the job, from the variables its launcher sets:
//   torchrun        RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (with its agent's store:
//                   TORCHELASTIC_USE_AGENT_STORE=True and TORCHELASTIC_RESTART_COUNT, the /worker/attempt_N prefix)
//   Open MPI        OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, ..._LOCAL_SIZE
//   MPICH / Hydra   PMI_RANK, PMI_SIZE (MPI_LOCALRANKID, MPI_LOCALNRANKS)
//   Slurm (srun)    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (SLURM_NTASKS_PER_NODE)
// The first family present wins, in that order. Without any, one process (rank 0 of 1). With more than one
// process, MASTER_ADDR and MASTER_PORT name the rendezvous (torchrun sets them; under mpirun and srun they are
// exported by the user or the batch script, as for torch.distributed).
struct LaunchEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // the job's processes on this machine, where the launcher says (else 1)
  std::string master_addr;
  int master_port = 0;
  std::string launcher = "none";  // torchrun, openmpi, mpich, slurm or none
  bool agent_store = false;       // torchrun's agent hosts the store; every worker is a client under a prefix
  int restart_count = 0;          // TORCHELASTIC_RESTART_COUNT: the prefix's attempt number
  bool distributed() const { return world_size > 1; }
};

// Reads the environment through `lookup` (std::getenv by default). Throws std::invalid_argument naming the variable
// and its value when one is not a number, a rank is outside the world, or the rendezvous is missing.
LaunchEnvironment launch_environment(const std::function<const char*(const char*)>& lookup = {});

// Whether this build has c10d's NCCL process group (a CUDA LibTorch built with the NCCL it loads).
bool nccl_available();

// HF's default ddp_backend for a device: nccl on a CUDA device where the build has it, else gloo.
std::string default_ddp_backend(const c10::Device& device);

// The processes of one job. Collectives block until every process has called them (or the timeout passes: then
// they throw, naming the operation); every process must call the same collectives in the same order.
class ProcessGroup {
 public:
  // Connects this process to the others (rank 0 hosts the TCPStore unless torchrun's agent does). `backend` is
  // HF's ddp_backend: "gloo" (tensors on the CPU or, where LibTorch has CUDA, a CUDA device) or "nccl" (`device`
  // must be this process's CUDA device; CPU tensors given to a collective travel through it). Throws
  // std::invalid_argument for a backend this build or device cannot run, std::runtime_error when the rendezvous or a
  // peer does not answer within `timeout`.
  static std::shared_ptr<ProcessGroup> connect(const LaunchEnvironment& environment, const std::string& backend,
                                               std::chrono::seconds timeout,
                                               const c10::Device& device = c10::Device(c10::kCPU));
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  // Sums `tensor` (contiguous; on the CPU or the group's device) over the processes, in place.
  void all_reduce_sum(torch::Tensor& tensor);
  // A collective under way; wait() blocks until it is done (throwing, as the blocking calls do, when a process died
  // or did not arrive in time). Destroying one not waited for waits, swallowing its error (an error path).
  class Pending {
   public:
    Pending();
    Pending(Pending&&) noexcept;
    Pending& operator=(Pending&&) noexcept;
    ~Pending();
    void wait();

   private:
    friend class ProcessGroup;
    struct Work;
    std::unique_ptr<Work> work_;
  };
  // all_reduce_sum started, not finished: `tensor` must not be read or written until wait() returns. The collective
  // takes its place in the order of collectives now. A CPU tensor of an nccl group is summed before this returns.
  Pending all_reduce_sum_async(torch::Tensor& tensor);
  // Copies `tensor` (contiguous; on the CPU or the group's device) of process `root` into every process's `tensor`
  // (same shape and type).
  void broadcast(torch::Tensor& tensor, int root);
  // Process `root`'s `text` on every process (the others' `text` is ignored).
  std::string broadcast_string(const std::string& text, int root);
  // True on every process when `flag` is true on any.
  bool any(bool flag);
  void barrier();

 private:
  struct State;
  explicit ProcessGroup(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace fitsum::train
