// `fitsum train --nproc_per_node N` on one machine without a launcher: this process starts N copies of the program
// with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
// MASTER_PORT), so they meet over the same c10d rendezvous as under torchrun (train/distributed.h): a convenience,
// not another engine. It forwards stop signals to them, and when one fails it stops the others, as torchrun does.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace fitsum::train {

struct LocalLaunchOptions {
  int processes = 1;
  // After a process failed, how long the others get to exit on SIGTERM before SIGKILL.
  std::chrono::seconds grace{30};
  // Polled while waiting: a stop signal to forward (0: none), e.g. train::requested_stop_signal.
  std::function<int()> stop_signal;
};

// Runs `arguments` (arguments[0] is the program's name) of `executable` as `options.processes` processes and waits
// for them. Each runs in its own process group (a terminal's Ctrl-C reaches only this process, which forwards it
// once) and gets SIGTERM if this process dies. Returns the status a shell would report: 0 when every process
// succeeded, else the first failure's exit status (128 + the signal for one killed by a signal). Throws
// std::runtime_error when a process cannot be started or no port is free.
int launch_local_processes(const std::string& executable, const std::vector<std::string>& arguments,
                           const LocalLaunchOptions& options);

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick).
int free_local_port();

}  // namespace fitsum::train
