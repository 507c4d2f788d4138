// A fault-injection library for tests, loaded with LD_PRELOAD into a fitsum process: it makes one kind of file-system
// call fail with a chosen errno, as a full disk (ENOSPC) or a failing one (EIO) would, so that tests can check that
// no such failure leaves a partial checkpoint where a reader can see it. Configured by the environment:
//   FITSUM_FAULT_OP     write | fsync | rename | rmdir | unlink | mkdir   (write covers write/pwrite/writev)
//   FITSUM_FAULT_ERRNO  ENOSPC | EIO | EROFS | EACCES                      (default ENOSPC)
//   FITSUM_FAULT_AFTER  N: calls 1..N-1 succeed, call N fails              (default 1)
//   FITSUM_FAULT_ONCE   1: only call N fails; otherwise every call from N on fails (a disk that stays full)
//   FITSUM_FAULT_UNDER  only calls on paths that start with this prefix count (required; stdout is never touched)
//   FITSUM_FAULT_FREE_BYTES  N: statvfs of a path under the prefix reports about N bytes available (a nearly full
//                       disk; no call fails). Needs FITSUM_FAULT_UNDER only.
// Each injected failure is reported on stderr as "fault-injection: <op> <path> -> <errno>".
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct Config {
  std::string op;
  int error = ENOSPC;
  long after = 1;
  bool once = false;
  std::string under;
  bool active = false;
  long long free_bytes = -1;  // -1: statvfs reports the truth
};

const Config& config() {
  static const Config c = [] {
    Config c;
    const char* op = std::getenv("FITSUM_FAULT_OP");
    const char* under = std::getenv("FITSUM_FAULT_UNDER");
    if (under == nullptr || *under == '\0') return c;
    if (const char* f = std::getenv("FITSUM_FAULT_FREE_BYTES")) {
      c.free_bytes = std::max(0LL, std::strtoll(f, nullptr, 10));
      c.under = under;
    }
    if (op == nullptr) return c;
    c.op = op;
    c.under = under;
    c.active = true;
    if (const char* e = std::getenv("FITSUM_FAULT_ERRNO")) {
      const std::string name = e;
      c.error = name == "EIO" ? EIO : name == "EROFS" ? EROFS : name == "EACCES" ? EACCES : ENOSPC;
    }
    if (const char* a = std::getenv("FITSUM_FAULT_AFTER")) c.after = std::max(1L, std::strtol(a, nullptr, 10));
    if (const char* o = std::getenv("FITSUM_FAULT_ONCE")) c.once = std::string(o) == "1";
    return c;
  }();
  return c;
}

std::atomic<long> g_calls{0};

std::string fd_path(int fd) {
  char link[64];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  char target[4096];
  const ssize_t n = ::readlink(link, target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<std::size_t>(n)) : std::string();
}

std::string at_path(int dirfd, const char* path) {
  if (path == nullptr) return {};
  if (path[0] == '/' || dirfd == AT_FDCWD) {
    if (path[0] == '/') return path;
    char cwd[4096];
    return ::getcwd(cwd, sizeof(cwd)) ? std::string(cwd) + "/" + path : std::string(path);
  }
  return fd_path(dirfd) + "/" + path;
}

// True when this call of `op` on `path` is to fail (errno is then set).
bool inject(const char* op, const std::string& path) {
  const Config& c = config();
  if (!c.active || c.op != op || path.compare(0, c.under.size(), c.under) != 0) return false;
  const long n = ++g_calls;
  if (n < c.after || (c.once && n != c.after)) return false;
  char line[4400];
  const int length =
      std::snprintf(line, sizeof(line), "fault-injection: %s %s -> %s\n", op, path.c_str(), std::strerror(c.error));
  if (length > 0) (void)!::syscall(SYS_write, 2, line, static_cast<std::size_t>(length));  // raw write(2), not our own
  errno = c.error;
  return true;
}

template <typename F>
F next(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

// Lowers the available blocks of a file system under the prefix to FITSUM_FAULT_FREE_BYTES.
void report_free_bytes(const std::string& path, struct statvfs* stats) {
  const Config& c = config();
  if (c.free_bytes < 0 || path.compare(0, c.under.size(), c.under) != 0 || stats->f_frsize == 0) return;
  stats->f_bavail = static_cast<fsblkcnt_t>(c.free_bytes) / stats->f_frsize;
}

}  // namespace

extern "C" {

int statvfs(const char* path, struct statvfs* stats) {
  static const auto real = next<int (*)(const char*, struct statvfs*)>("statvfs");
  const int result = real(path, stats);
  if (result == 0) report_free_bytes(at_path(AT_FDCWD, path), stats);
  return result;
}

int statvfs64(const char* path, struct statvfs64* stats) {
  static const auto real = next<int (*)(const char*, struct statvfs64*)>("statvfs64");
  const int result = real(path, stats);
  if (result == 0) report_free_bytes(at_path(AT_FDCWD, path), reinterpret_cast<struct statvfs*>(stats));
  return result;
}

ssize_t write(int fd, const void* buffer, size_t size) {
  static const auto real = next<ssize_t (*)(int, const void*, size_t)>("write");
  if (fd > 2 && config().active && inject("write", fd_path(fd))) return -1;
  return real(fd, buffer, size);
}

ssize_t pwrite64(int fd, const void* buffer, size_t size, off64_t offset) {
  static const auto real = next<ssize_t (*)(int, const void*, size_t, off64_t)>("pwrite64");
  if (fd > 2 && config().active && inject("write", fd_path(fd))) return -1;
  return real(fd, buffer, size, offset);
}

ssize_t writev(int fd, const struct iovec* iov, int count) {
  static const auto real = next<ssize_t (*)(int, const struct iovec*, int)>("writev");
  if (fd > 2 && config().active && inject("write", fd_path(fd))) return -1;
  return real(fd, iov, count);
}

int fsync(int fd) {
  static const auto real = next<int (*)(int)>("fsync");
  if (config().active && inject("fsync", fd_path(fd))) return -1;
  return real(fd);
}

int fdatasync(int fd) {
  static const auto real = next<int (*)(int)>("fdatasync");
  if (config().active && inject("fsync", fd_path(fd))) return -1;
  return real(fd);
}

int rename(const char* from, const char* to) {
  static const auto real = next<int (*)(const char*, const char*)>("rename");
  if (config().active && inject("rename", at_path(AT_FDCWD, to))) return -1;
  return real(from, to);
}

int renameat(int from_dir, const char* from, int to_dir, const char* to) {
  static const auto real = next<int (*)(int, const char*, int, const char*)>("renameat");
  if (config().active && inject("rename", at_path(to_dir, to))) return -1;
  return real(from_dir, from, to_dir, to);
}

int renameat2(int from_dir, const char* from, int to_dir, const char* to, unsigned int flags) {
  static const auto real = next<int (*)(int, const char*, int, const char*, unsigned int)>("renameat2");
  if (config().active && inject("rename", at_path(to_dir, to))) return -1;
  return real(from_dir, from, to_dir, to, flags);
}

int rmdir(const char* path) {
  static const auto real = next<int (*)(const char*)>("rmdir");
  if (config().active && inject("rmdir", at_path(AT_FDCWD, path))) return -1;
  return real(path);
}

int unlink(const char* path) {
  static const auto real = next<int (*)(const char*)>("unlink");
  if (config().active && inject("unlink", at_path(AT_FDCWD, path))) return -1;
  return real(path);
}

int unlinkat(int dir, const char* path, int flags) {
  static const auto real = next<int (*)(int, const char*, int)>("unlinkat");
  if (config().active && inject((flags & AT_REMOVEDIR) ? "rmdir" : "unlink", at_path(dir, path))) return -1;
  return real(dir, path, flags);
}

int remove(const char* path) {
  static const auto real = next<int (*)(const char*)>("remove");
  struct stat st {};
  const bool dir = ::lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
  if (config().active && inject(dir ? "rmdir" : "unlink", at_path(AT_FDCWD, path))) return -1;
  return real(path);
}

int mkdir(const char* path, mode_t mode) {
  static const auto real = next<int (*)(const char*, mode_t)>("mkdir");
  if (config().active && inject("mkdir", at_path(AT_FDCWD, path))) return -1;
  return real(path, mode);
}

}  // extern "C"
