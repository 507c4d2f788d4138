// Implements tools/fitsum/standard_streams.h.
#include "standard_streams.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "fitsum/util/files.h"

namespace fitsum::cli {

namespace {

// Why earlier writes to standard output failed, asked of the descriptor again once its buffer is empty: a pipe
// whose reader left polls as an error; a zero-byte write still reports a full device (/dev/full) or a descriptor
// that cannot be written (EBADF). 0 when it does not say.
int standard_output_problem() {
  struct pollfd descriptor {};
  descriptor.fd = STDOUT_FILENO;
  descriptor.events = POLLOUT;
  if (::poll(&descriptor, 1, 0) == 1 && (descriptor.revents & POLLERR) != 0) return EPIPE;
  if (::write(STDOUT_FILENO, "", 0) < 0) return errno;
  return 0;
}

}  // namespace

void prepare_process() {
  for (const int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int placeholder = ::open("/dev/null", O_RDONLY);
    if (placeholder >= 0 && placeholder != fd) {
      ::dup2(placeholder, fd);
      ::close(placeholder);
    }
  }
  std::signal(SIGXFSZ, SIG_IGN);
  util::remove_temporary_files_on_signals();
}

int finish_standard_output() {
  std::cout.flush();
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  int problem = errno;
  if (!flush_failed && std::ferror(stdout) == 0 && !std::cout.fail()) return 0;
  if (!flush_failed) problem = standard_output_problem();
  if (problem == EPIPE) return 0;
  std::cerr << "fitsum: error: cannot write to standard output: "
            << (problem != 0 ? std::strerror(problem) : "a write failed") << "\n";
  return 1;
}

}  // namespace fitsum::cli
