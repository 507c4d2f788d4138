// Implements include/fitsum/train/distributed.h on c10d: a TCPStore (behind torchrun's PrefixStore when its agent
// hosts the store) and ProcessGroupGloo.
#include "fitsum/train/distributed.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
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

namespace {

// c10d reports socket trouble through c10's logger (glog in Debian's LibTorch), straight to stderr ("E1205 ...
// socket.cpp:860] [c10d] The client socket has timed out ..."), beside the one line fitsum prints about the same
// trouble. c10's level is raised above errors while the processes connect (c10d's log macros check it), unless
// TORCH_CPP_LOG_LEVEL asks for c10's log; fitsum's own errors do not go through it.
class QuietC10Log {
 public:
  QuietC10Log() : quiet_(std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) {
    if (!quiet_) return;
    const std::lock_guard<std::mutex> lock(mutex_);
    if (active_++ == 0) {  // several ranks may connect at once as threads of one process (the tests)
      saved_ = FLAGS_caffe2_log_level;
      FLAGS_caffe2_log_level = kFatal;
    }
  }
  // After a failed rendezvous c10's log stays quiet: a connection still under way may report its end later.
  void restore() const {
    if (!quiet_) return;
    const std::lock_guard<std::mutex> lock(mutex_);
    if (--active_ == 0) FLAGS_caffe2_log_level = saved_;
  }

 private:
  static constexpr int kFatal = 3;
  static inline std::mutex mutex_;
  static inline int active_ = 0;
  static inline int saved_ = 0;
  bool quiet_;
};

// Where a rendezvous is, shared by the thread that connects and the one that waits for it with the deadline.
struct Rendezvous {
  enum class Stage { store, joining, group };
  std::atomic<Stage> stage{Stage::store};
  std::atomic<int> joined{0};  // processes that joined the store, once this process joined (0 before)
  std::promise<c10::intrusive_ptr<Collectives>> result;
};

// The rendezvous itself took longer than the deadline: names the processes that never arrived.
class PeersMissing : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string joined_key(int rank) { return "fitsum/joined/" + std::to_string(rank); }

// Up to 8 ranks that have not joined, as "rank 1" or "ranks 1, 2, 5 and more".
std::string missing_ranks(c10d::Store& store, int world_size) {
  std::vector<int> missing;
  for (int r = 0; r < world_size && missing.size() < 8 && r < 4096; ++r) {
    if (!store.check({joined_key(r)})) missing.push_back(r);
  }
  if (missing.empty()) return "no rank";
  std::string text = missing.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < missing.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(missing[i]);
  return missing.size() == 8 ? text + " and more" : text;
}

// Every process marks itself joined and waits until all have (c10d's TCPStore waits on rank 0 only, and past its
// timeout goes on into the process group's own wait): throws PeersMissing at `deadline`.
void wait_for_every_process(c10d::Store& store, const LaunchEnvironment& env,
                            std::chrono::steady_clock::time_point deadline, Rendezvous& rendezvous) {
  store.set(joined_key(env.rank), std::vector<std::uint8_t>{1});
  auto joined = store.add("fitsum/joined", 1);
  for (;;) {
    rendezvous.joined = static_cast<int>(joined);
    if (joined >= env.world_size) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw PeersMissing(missing_ranks(store, env.world_size) + " never arrived (" + std::to_string(joined) + " of " +
                         std::to_string(env.world_size) + " processes joined)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    joined = store.add("fitsum/joined", 0);
  }
}

c10::intrusive_ptr<Collectives> make_group(const c10::intrusive_ptr<c10d::Store>& store, const LaunchEnvironment& env,
                                           const std::string& backend, std::chrono::seconds timeout,
                                           const c10::Device& device) {
#ifdef FITSUM_WITH_NCCL
  if (backend == "nccl") {
    auto nccl = c10d::ProcessGroupNCCL::Options::create();
    nccl->timeout = timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, nccl);
  }
#endif
  auto gloo = c10d::ProcessGroupGloo::Options::create();
  gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  gloo->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, gloo);
}

// The connecting thread: the store (rank 0 hosts it unless torchrun's agent does), every process joined, the group.
void rendezvous_thread(const std::shared_ptr<Rendezvous>& rendezvous, const LaunchEnvironment& env,
                       const std::string& backend, std::chrono::seconds timeout, const c10::Device& device,
                       std::chrono::steady_clock::time_point deadline) {
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(env.master_port);
    options.isServer = env.rank == 0 && !env.agent_store;
    options.numWorkers = env.world_size;
    options.waitWorkers = false;  // wait_for_every_process waits, within the deadline, and says for whom
    options.timeout = timeout;
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    if (env.agent_store) {
      store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count), store);
    }
    rendezvous->stage = Rendezvous::Stage::joining;
    wait_for_every_process(*store, env, deadline, *rendezvous);
    rendezvous->stage = Rendezvous::Stage::group;
    rendezvous->result.set_value(make_group(store, env, backend, timeout, device));
  } catch (...) {
    rendezvous->result.set_exception(std::current_exception());
  }
}

bool port_in_use(const std::string& message) {
  std::string lower = message;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("address already in use") != std::string::npos || lower.find("eaddrinuse") != std::string::npos;
}

// The one line for a rendezvous that failed or did not end by its deadline (`error` empty then).
std::string rendezvous_failure(const LaunchEnvironment& env, const Rendezvous& rendezvous, std::chrono::seconds timeout,
                               double elapsed, std::string error, bool peers_missing) {
  while (!error.empty() && (error.back() == '.' || error.back() == ' ')) error.pop_back();  // a clause of ours follows
  const std::string who = "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size);
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  const std::string seconds = std::to_string(timeout.count()) + " s";
  const std::string same = "the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE=" + std::to_string(env.world_size);
  if (port_in_use(error)) {
    return who + " cannot host the rendezvous at " + where + ": port " + std::to_string(env.master_port) +
           " is in use (another program, or another job's rank 0, listens there); choose a free port with "
           "MASTER_PORT, the same for every process (fitsum train --nproc_per_node picks one itself)";
  }
  if (peers_missing) {
    return who + " waited " + seconds + " (ddp_timeout) at the rendezvous " + where + ": " + error +
           "; start every process of the job with " + same + ", or raise --ddp_timeout";
  }
  if (rendezvous.stage == Rendezvous::Stage::store) {
    return who + " could not reach the rendezvous at " + where + " within " + seconds + " (ddp_timeout): " +
           (error.empty() ? "nothing accepted a connection there" : error) + "; start rank 0 with " + same +
           " (rank 0 hosts it), or raise --ddp_timeout";
  }
  if (rendezvous.stage == Rendezvous::Stage::joining && rendezvous.joined == 0) {
    return who + " connected to " + where + ", but nothing answered there as a rendezvous within " + seconds +
           " (ddp_timeout)" + (error.empty() ? "" : " (" + error + ")") +
           ": the port belongs to another program, not to rank 0's rendezvous; check MASTER_ADDR and MASTER_PORT";
  }
  if (error.empty()) {
    return who + " joined the rendezvous at " + where + " with the other " + std::to_string(env.world_size - 1) +
           " processes, but their connections to each other were not made within " + seconds +
           " (ddp_timeout): a process that stopped, or a firewall between the machines; raise --ddp_timeout or check "
           "the network";
  }
  char after[32];
  std::snprintf(after, sizeof after, "%.1f", elapsed);
  return who + " could not join the rendezvous at " + where + " (after " + after + " s, ddp_timeout " + seconds +
         "): " + error;
}

}  // namespace

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
  // c10d's own timeouts apply to each of its steps, one after another, and not at all to a store that accepts the
  // connection and never answers: the rendezvous runs on a thread of its own, and this one gives it ddp_timeout
  // (and a second for its own error to arrive). A thread that never ends is left behind; the process is failing.
  const QuietC10Log quiet;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  auto rendezvous = std::make_shared<Rendezvous>();
  auto result = rendezvous->result.get_future();
  std::thread(rendezvous_thread, rendezvous, env, backend, timeout, device, deadline).detach();
  if (result.wait_until(deadline + std::chrono::seconds(1)) != std::future_status::ready) {
    throw std::runtime_error(rendezvous_failure(env, *rendezvous, timeout, 0.0, "", false));
  }
  try {
    state->group = result.get();
  } catch (const std::exception& e) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    throw std::runtime_error(rendezvous_failure(env, *rendezvous, timeout, elapsed, without_backtrace(e),
                                                dynamic_cast<const PeersMissing*>(&e) != nullptr));
  }
  quiet.restore();
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
