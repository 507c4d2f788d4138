// Implements include/fitsum/io/output_folder_lock.h with flock(2) on a file inside the folder.
#include "fitsum/io/output_folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <thread>

#include "fitsum/util/files.h"

namespace fitsum::io {

namespace {

std::string errno_text(int error) { return std::strerror(error); }

std::string host_name() {
  char name[256] = {0};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}


// "<pid> <host>" as the holder wrote it; the holder writes it right after locking, so an empty file is read again
// for a moment before the pid is given up as unknown.
std::pair<long, std::string> read_holder(int fd) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    char text[320] = {0};
    const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
    long pid = 0;
    char host[300] = {0};
    if (n > 0 && std::sscanf(text, "%ld %299s", &pid, host) >= 1 && pid > 0) return {pid, host};
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {0, ""};
}

[[noreturn]] void throw_busy(const fs::path& folder, const fs::path& file, int fd) {
  const auto [pid, host] = read_holder(fd);
  ::close(fd);
  std::string holder = pid > 0 ? "pid " + std::to_string(pid) : "a process whose pid the lock file does not give";
  if (pid > 0 && !host.empty() && host != host_name()) holder += " on host " + host;
  throw OutputFolderBusy("output_dir '" + folder.string() + "' is in use by another training run (" + holder +
                             ", which holds " + file.string() +
                             "); wait for that run to end or stop it, or choose another output_dir",
                         pid);
}

}  // namespace

OutputFolderLock::OutputFolderLock(const fs::path& output_dir)
    : folder_(output_dir), file_(output_dir / kOutputFolderLockName) {
  std::error_code error;
  fs::create_directories(folder_, error);
  if (error) {
    throw std::runtime_error("output_dir '" + folder_.string() + "' cannot be created (" + error.message() +
                             "); choose a folder you can write to");
  }
  // The previous holder removes the file before it releases the lock: a lock taken on a file that no longer has the
  // name is on a file no other process will look at, so it is given back and the name's current file is locked.
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(file_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
      throw std::runtime_error("cannot create the lock file '" + file_.string() +
                               "' of output_dir: " + errno_text(errno) + "; choose a folder you can write to");
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int lock_error = errno;
      if (lock_error == EWOULDBLOCK) throw_busy(folder_, file_, fd);
      ::close(fd);
      throw std::runtime_error("cannot lock '" + file_.string() + "': " + errno_text(lock_error) +
                               "; output_dir must be on a file system that supports file locks");
    }
    if (util::still_named(fd, file_)) {
      fd_ = fd;
      break;
    }
    ::close(fd);
    if (attempt == 100) throw std::runtime_error("the lock file '" + file_.string() + "' keeps being replaced");
  }
  const std::string holder = std::to_string(::getpid()) + " " + host_name() + "\n";
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
    const int write_error = errno;
    ::unlink(file_.c_str());
    ::close(fd_);
    throw std::runtime_error("cannot write the lock file '" + file_.string() + "': " + errno_text(write_error) +
                             "; check the disk (full, read-only or failing)");
  }
}

OutputFolderLock::~OutputFolderLock() {
  if (fd_ < 0) return;
  if (util::still_named(fd_, file_)) ::unlink(file_.c_str());
  ::close(fd_);
}

}  // namespace fitsum::io
