// Implements include/fitsum/train/local_launch.h with fork, execve and waitpid.
#include "fitsum/train/local_launch.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace fitsum::train {

namespace {

int shell_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// This process's environment without the launch variables, plus the rank's own.
std::vector<std::string> rank_environment(int rank, int processes, int port) {
  static const char* const kSet[] = {"RANK=",
                                     "WORLD_SIZE=",
                                     "LOCAL_RANK=",
                                     "LOCAL_WORLD_SIZE=",
                                     "MASTER_ADDR=",
                                     "MASTER_PORT=",
                                     "TORCHELASTIC_USE_AGENT_STORE="};
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    bool replaced = false;
    for (const char* prefix : kSet) replaced = replaced || std::strncmp(*e, prefix, std::strlen(prefix)) == 0;
    if (!replaced) out.emplace_back(*e);
  }
  out.push_back("RANK=" + std::to_string(rank));
  out.push_back("WORLD_SIZE=" + std::to_string(processes));
  out.push_back("LOCAL_RANK=" + std::to_string(rank));
  out.push_back("LOCAL_WORLD_SIZE=" + std::to_string(processes));
  out.push_back("MASTER_ADDR=127.0.0.1");
  out.push_back("MASTER_PORT=" + std::to_string(port));
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

pid_t start(const std::string& executable, std::vector<std::string> arguments, std::vector<std::string> environment) {
  auto argv = pointers(arguments);
  auto envp = pointers(environment);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("--nproc_per_node: fork failed: ") + std::strerror(errno));
  if (pid == 0) {  // only async-signal-safe calls until execve
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(143);
    ::execve(executable.c_str(), argv.data(), envp.data());
    static const char message[] = "fitsum: --nproc_per_node: could not execute the fitsum binary\n";
    (void)!::write(STDERR_FILENO, message, sizeof(message) - 1);
    ::_exit(127);
  }
  return pid;
}

}  // namespace

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("no socket for a free TCP port: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("no free TCP port on 127.0.0.1");
  return ntohs(address.sin_port);
}

int launch_local_processes(const std::string& executable, const std::vector<std::string>& arguments,
                           const LocalLaunchOptions& options) {
  if (options.processes < 1) throw std::invalid_argument("nproc_per_node must be at least 1");
  const int port = free_local_port();
  std::vector<pid_t> running;
  for (int rank = 0; rank < options.processes; ++rank) {
    try {
      running.push_back(start(executable, arguments, rank_environment(rank, options.processes, port)));
    } catch (...) {
      for (const auto pid : running) ::kill(pid, SIGKILL);
      for (const auto pid : running) ::waitpid(pid, nullptr, 0);
      throw;
    }
  }
  int result = 0;
  bool forwarded = false;
  std::chrono::steady_clock::time_point kill_at = std::chrono::steady_clock::time_point::max();
  while (!running.empty()) {
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      const auto it = std::find(running.begin(), running.end(), done);
      if (it == running.end()) continue;
      running.erase(it);
      const int code = shell_status(status);
      if (code != 0 && result == 0) {
        result = code;
        // One process failed: the others would wait for it at the next collective until ddp_timeout.
        if (!forwarded) {
          for (const auto pid : running) ::kill(pid, SIGTERM);
          kill_at = std::chrono::steady_clock::now() + options.grace;
        }
      }
      continue;
    }
    if (done < 0 && errno != EINTR) break;
    const int signal_number = options.stop_signal ? options.stop_signal() : 0;
    if (signal_number != 0 && !forwarded) {
      forwarded = true;
      for (const auto pid : running) ::kill(pid, signal_number);
    }
    if (std::chrono::steady_clock::now() >= kill_at) {
      for (const auto pid : running) ::kill(pid, SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

}  // namespace fitsum::train
