// Implements include/fitsum/train/distributed.h on c10d: a TCPStore (behind torchrun's PrefixStore when its agent
// hosts the store) and ProcessGroupGloo.
#include "fitsum/train/distributed.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef FITSUM_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <torch/torch.h>

#include "fitsum/util/torch_compat.h"

namespace fitsum::train {

namespace {

using Lookup = std::function<const char*(const char*)>;

const char* get(const Lookup& lookup, const char* name) {
  const char* value = lookup(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

int integer(const Lookup& lookup, const char* name, int low, int high) {
  const char* text = get(lookup, name);
  if (text == nullptr) throw std::invalid_argument(std::string(name) + " is not set");
  const std::string value(text);
  int number = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (error != std::errc() || end != value.data() + value.size() || number < low || number > high) {
    throw std::invalid_argument(std::string(name) + "='" + value + "' is not a whole number from " +
                                std::to_string(low) + " to " + std::to_string(high));
  }
  return number;
}

// One launcher's variable names: rank, world size, local rank and local world size (the last two optional).
struct Family {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr Family kFamilies[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

constexpr int kMaxProcesses = 1 << 20;

// c10d's message without LibTorch's backtrace, on one line.
std::string without_backtrace(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10 != nullptr ? c10->what_without_backtrace() : e.what();
  for (auto& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace

LaunchEnvironment launch_environment(const std::function<const char*(const char*)>& lookup_or_default) {
  const Lookup lookup = lookup_or_default ? lookup_or_default : Lookup([](const char* n) { return std::getenv(n); });
  LaunchEnvironment env;
  const Family* family = nullptr;
  for (const auto& f : kFamilies) {
    if (get(lookup, f.size) != nullptr || get(lookup, f.rank) != nullptr) {
      family = &f;
      break;
    }
  }
  if (family == nullptr) return env;
  env.launcher = family->launcher;
  env.world_size = integer(lookup, family->size, 1, kMaxProcesses);
  env.rank = integer(lookup, family->rank, 0, env.world_size - 1);
  env.local_rank =
      get(lookup, family->local_rank) != nullptr ? integer(lookup, family->local_rank, 0, kMaxProcesses) : 0;
  env.local_world_size =
      get(lookup, family->local_size) != nullptr ? integer(lookup, family->local_size, 1, env.world_size) : 1;
  if (!env.distributed()) return env;
  const char* addr = get(lookup, "MASTER_ADDR");
  if (addr == nullptr) {
    throw std::invalid_argument(std::string(family->size) + "=" + std::to_string(env.world_size) +
                                " but MASTER_ADDR is not set: export MASTER_ADDR and MASTER_PORT (the host and port "
                                "of rank 0's rendezvous), as torchrun does");
  }
  env.master_addr = addr;
  env.master_port = integer(lookup, "MASTER_PORT", 1, 65535);
  const char* agent = get(lookup, "TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent != nullptr && (std::string(agent) == "True" || std::string(agent) == "true");
  if (get(lookup, "TORCHELASTIC_RESTART_COUNT") != nullptr) {
    env.restart_count = integer(lookup, "TORCHELASTIC_RESTART_COUNT", 0, kMaxProcesses);
  }
  return env;
}

// What both process groups implement: c10d::Backend since PyTorch 2.0, c10d::ProcessGroup before.
#if FITSUM_TORCH_AT_LEAST(2, 0)
using Collectives = c10d::Backend;
#else
using Collectives = c10d::ProcessGroup;
#endif
// A started collective (c10d::ProcessGroup::Work in 1.13, c10d::Work since 2.0).
using WorkHandle = decltype(std::declval<Collectives&>().allreduce(std::declval<std::vector<at::Tensor>&>()));

bool nccl_available() {
#ifdef FITSUM_WITH_NCCL
  return true;
#else
  return false;
#endif
}

std::string default_ddp_backend(const c10::Device& device) {
  return device.is_cuda() && nccl_available() ? "nccl" : "gloo";
}

struct ProcessGroup::State {
  c10::intrusive_ptr<Collectives> group;
  // nccl: the CUDA device its collectives run on (CPU tensors are copied there and back); gloo: the CPU.
  c10::Device device = c10::Device(c10::kCPU);
  int rank = 0;
  int size = 1;
  std::chrono::seconds timeout{0};

  ~State() {
#ifdef FITSUM_WITH_NCCL
    // NCCL's watchdog thread keeps a process alive until its group is shut down (destroy_process_group in Python).
    if (group && !device.is_cpu()) {
      try {
        group->shutdown();
      } catch (const std::exception&) {
      }
    }
#endif
  }

  // `run` on `tensor` where the backend takes it: a CPU tensor of an nccl group through a copy on its device.
  template <typename Run>
  void on_device(torch::Tensor& tensor, Run&& run) {
    if (device.is_cpu() || tensor.device() == device) {
      run(tensor);
      return;
    }
    auto staged = tensor.to(device);
    run(staged);
    tensor.copy_(staged.to(tensor.device()));
  }

  // Runs a collective, turning c10d's errors (a peer gone, the timeout) into one line that says what failed.
  template <typename Run>
  void collective(const char* what, Run&& run) {
    try {
      run();
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(what) + " across " + std::to_string(size) + " processes failed on rank " +
                               std::to_string(rank) + " (another process died or did not arrive within " +
                               std::to_string(timeout.count()) + " s, ddp_timeout): " + without_backtrace(e));
    }
  }
};

ProcessGroup::ProcessGroup(std::unique_ptr<State> state) : state_(std::move(state)) {}
ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> ProcessGroup::connect(const LaunchEnvironment& env, const std::string& backend,
                                                    std::chrono::seconds timeout, const c10::Device& device) {
  if (backend == "nccl" && !nccl_available()) {
    throw std::invalid_argument(
        "ddp_backend nccl: this fitsum is built without NCCL (a CPU LibTorch, or a CUDA one "
        "configured without FITSUM_NCCL_ROOT: make build-cuda); use ddp_backend gloo");
  }
  if (backend == "nccl" && !device.is_cuda()) {
    throw std::invalid_argument("ddp_backend nccl runs on CUDA devices; this process trains on " + device.str() +
                                ": use ddp_backend gloo for CPU processes");
  }
  if (backend != "nccl" && backend != "gloo") {
    throw std::invalid_argument("ddp_backend '" + backend + "' is not one of gloo, nccl");
  }
  auto state = std::make_unique<State>();
  if (backend == "nccl") state->device = device;
  state->rank = env.rank;
  state->size = env.world_size;
  state->timeout = timeout;
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(env.master_port);
    options.isServer = env.rank == 0 && !env.agent_store;
    options.numWorkers = env.world_size;
    options.timeout = timeout;
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    if (env.agent_store) {
      store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count), store);
    }
    if (backend == "nccl") {
#ifdef FITSUM_WITH_NCCL
      auto nccl = c10d::ProcessGroupNCCL::Options::create();
      nccl->timeout = timeout;
      state->group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, nccl);
#endif
    } else {
      auto gloo = c10d::ProcessGroupGloo::Options::create();
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      gloo->timeout = timeout;
      state->group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, gloo);
    }
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                             " could not join the rendezvous at " + env.master_addr + ":" +
                             std::to_string(env.master_port) + " within " + std::to_string(timeout.count()) +
                             " s: " + without_backtrace(e));
  }
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(state)));
}

int ProcessGroup::rank() const { return state_->rank; }
int ProcessGroup::size() const { return state_->size; }

void ProcessGroup::all_reduce_sum(torch::Tensor& tensor) {
  state_->collective("all-reduce", [&] {
    state_->on_device(tensor, [&](torch::Tensor& t) {
      std::vector<at::Tensor> tensors{t};
      state_->group->allreduce(tensors)->wait();
    });
  });
}

struct ProcessGroup::Pending::Work {
  WorkHandle work;
  ProcessGroup::State* group = nullptr;
};

ProcessGroup::Pending::Pending() = default;
ProcessGroup::Pending::Pending(Pending&&) noexcept = default;
ProcessGroup::Pending& ProcessGroup::Pending::operator=(Pending&& other) noexcept {
  if (this != &other) {
    try {
      if (work_) wait();
    } catch (const std::exception&) {
    }
    work_ = std::move(other.work_);
  }
  return *this;
}

ProcessGroup::Pending::~Pending() {
  try {
    if (work_) wait();
  } catch (const std::exception&) {  // already failing: the error that unwinds is the one to report
  }
}

void ProcessGroup::Pending::wait() {
  if (!work_) return;
  auto work = std::move(work_);
  work->group->collective("all-reduce", [&] { work->work->wait(); });
}

ProcessGroup::Pending ProcessGroup::all_reduce_sum_async(torch::Tensor& tensor) {
  Pending pending;
  if (!state_->device.is_cpu() && tensor.device() != state_->device) {
    all_reduce_sum(tensor);  // staged through the device: nothing to overlap with
    return pending;
  }
  pending.work_ = std::make_unique<Pending::Work>();
  pending.work_->group = state_.get();
  state_->collective("all-reduce", [&] {
    std::vector<at::Tensor> tensors{tensor};
    pending.work_->work = state_->group->allreduce(tensors);
  });
  return pending;
}

void ProcessGroup::broadcast(torch::Tensor& tensor, int root) {
  state_->collective("broadcast", [&] {
    state_->on_device(tensor, [&](torch::Tensor& t) {
      std::vector<at::Tensor> tensors{t};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      state_->group->broadcast(tensors, options)->wait();
    });
  });
}

std::string ProcessGroup::broadcast_string(const std::string& text, int root) {
  auto length = torch::full({1}, static_cast<std::int64_t>(text.size()), torch::kLong);
  broadcast(length, root);
  auto bytes = torch::zeros({length.item<std::int64_t>()}, torch::kUInt8);
  if (rank() == root) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  broadcast(bytes, root);
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(bytes.numel()));
}

bool ProcessGroup::any(bool flag) {
  auto t = torch::full({1}, flag ? 1.0 : 0.0, torch::kDouble);
  all_reduce_sum(t);
  return t.item<double>() > 0.0;
}

void ProcessGroup::barrier() {
  state_->collective("barrier", [&] { state_->group->barrier()->wait(); });
}

}  // namespace fitsum::train
