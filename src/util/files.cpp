// Implements include/fitsum/util/files.h with POSIX calls where it matters: stat before open and fstat after it
// (the file type), O_NONBLOCK (a FIFO never blocks the open), fsync and rename (durability), flock (whether a
// temporary file's writer still runs).
#include "fitsum/util/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "fitsum/util/checked_math.h"

namespace fitsum::util {

namespace {

std::string errno_text() { return std::strerror(errno); }

std::string kind_of_mode(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void refuse(const fs::path& path, std::string_view what, const std::string& why) {
  throw std::runtime_error("cannot read " + std::string(what) + " '" + path.string() + "': " + why +
                           "; pass a regular file (a symbolic link to one is fine)");
}

// Thrown from the JSON parser callback; turned into a message naming the source.
struct JsonTooDeep {};

}  // namespace

bool folder_has_file(const fs::path& dir, std::string_view name) {
  std::error_code error;
  return fs::is_regular_file(dir / name, error);
}

std::string file_kind_problem(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return "it does not exist";
    if (errno == ELOOP) return "its symbolic links form a loop";
    return "it cannot be examined (" + errno_text() + ")";
  }
  const std::string kind = kind_of_mode(st.st_mode);
  return kind.empty() ? "" : "it is " + kind + ", not a regular file";
}

void require_regular_file(const fs::path& path, std::string_view what) {
  const std::string problem = file_kind_problem(path);
  if (!problem.empty()) refuse(path, what, problem);
}

ReadableFile::ReadableFile(const fs::path& path, std::string_view what) : path_(path), what_(what) {
  require_regular_file(path_, what_);
  fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd_ < 0) refuse(path_, what_, "it cannot be opened (" + errno_text() + ")");
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = kind_of_mode(st.st_mode);
    ::close(fd_);
    fd_ = -1;
    refuse(path_, what_, "it is " + (kind.empty() ? std::string("not readable") : kind) + ", not a regular file");
  }
  // Regular files ignore O_NONBLOCK; clear it anyway so that reads mean what they say.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = static_cast<std::uint64_t>(st.st_size);
}

ReadableFile::~ReadableFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t ReadableFile::read_some(void* buffer, std::size_t size) {
  for (;;) {
    const ssize_t n = ::read(fd_, buffer, size);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno != EINTR) {
      throw std::runtime_error("cannot read " + what_ + " '" + path_.string() + "': " + errno_text());
    }
  }
}

MappedFile::MappedFile(const fs::path& path, std::string_view what) : path_(path) {
  ReadableFile file(path, what);
  size_ = static_cast<std::size_t>(file.size());
  if (size_ == 0) return;  // mmap refuses empty ranges; an empty file is simply no bytes
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.descriptor(), 0);
  if (mapped == MAP_FAILED) {
    throw std::runtime_error("cannot map " + std::string(what) + " '" + path.string() + "': " + errno_text());
  }
  data_ = static_cast<const unsigned char*>(mapped);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
}

std::string read_file(const fs::path& path, std::uint64_t max_bytes) {
  ReadableFile file(path, "the file");
  const auto too_large = [&](std::uint64_t size) {
    return std::runtime_error("cannot read '" + path.string() + "': it has " + std::to_string(size) +
                              " bytes, more than the " + std::to_string(max_bytes) +
                              "-byte limit for this kind of file; check that it is the file you meant");
  };
  if (file.size() > max_bytes) throw too_large(file.size());
  std::string text(static_cast<std::size_t>(file.size()), '\0');
  std::size_t filled = 0;
  for (;;) {
    if (filled == text.size()) {
      if (text.size() >= max_bytes) {  // the file grew while being read: see whether it really goes on
        char probe = 0;
        if (file.read_some(&probe, 1) == 0) break;
        throw too_large(text.size() + 1);
      }
      text.resize(std::min<std::uint64_t>(max_bytes, text.size() * 2 + 4096));
    }
    const std::size_t n = file.read_some(text.data() + filled, text.size() - filled);
    if (n == 0) break;
    filled += n;
  }
  text.resize(filled);
  return text;
}

JsonError::JsonError(const std::string& source, std::string reason)
    : std::runtime_error(source + " is not valid JSON (" + reason + "); fix the file or write it again"),
      reason_(std::move(reason)) {}

nlohmann::json parse_json(std::string_view text, const std::string& source, int max_depth) {
  using nlohmann::json;
  const json::parser_callback_t bound = [max_depth](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth) {
      throw JsonTooDeep{};
    }
    return true;
  };
  const auto without_prefix = [](const json::exception& e) {
    std::string why = e.what();
    if (const auto end = why.find("] "); why.rfind("[json.exception", 0) == 0 && end != std::string::npos) {
      why.erase(0, end + 2);  // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ..."
    }
    return why;
  };
  try {
    return json::parse(text.begin(), text.end(), bound);
  } catch (const json::parse_error& e) {
    throw JsonError(source, "byte " + std::to_string(e.byte) + ": " + without_prefix(e));
  } catch (const json::exception& e) {
    // Valid JSON syntax that nlohmann cannot hold: a number past a double's range ("1e999", out_of_range.406).
    throw JsonError(source, without_prefix(e));
  } catch (const JsonTooDeep&) {
    throw JsonError(source, "arrays and objects nest more than " + std::to_string(max_depth) +
                                " levels deep, far more than any file fitsum reads needs");
  }
}

nlohmann::json read_json_file(const fs::path& path, std::uint64_t max_bytes) {
  return parse_json(read_file(path, max_bytes), "'" + path.string() + "'");
}

void require_writable_folder(const fs::path& dir, std::string_view what, bool create) {
  const auto refuse = [&](const std::string& why, const std::string& hint) {
    throw std::runtime_error(std::string(what) + " '" + dir.string() + "' " + why + "; " + hint);
  };
  std::error_code error;
  if (create) fs::create_directories(dir, error);
  if (error) refuse("cannot be created (" + error.message() + ")", "choose a folder you can write to");
  if (!fs::is_directory(dir, error)) {
    refuse(fs::exists(dir, error) ? "is not a folder" : "does not exist", "create it or choose another folder");
  }
  // An unnamed file (never visible, gone with the descriptor); a named one where the file system has none.
  int fd = ::open(dir.c_str(), O_WRONLY | O_TMPFILE | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    const fs::path probe = dir / (".fitsum-write-test-" + std::to_string(::getpid()));
    fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) ::unlink(probe.c_str());
  }
  if (fd < 0) refuse("is not writable (" + errno_text() + ")", "choose a folder you can write to");
  ::close(fd);
}

std::optional<std::uint64_t> free_disk_bytes(const fs::path& dir) {
  struct statvfs stats {};
  if (::statvfs(dir.c_str(), &stats) != 0) return std::nullopt;
  std::uint64_t bytes = 0;
  if (multiply_overflows<std::uint64_t>(stats.f_bavail, stats.f_frsize, bytes)) {
    return std::numeric_limits<std::uint64_t>::max();
  }
  return bytes;
}

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return;  // Some file systems do not allow opening folders; the rename itself has happened.
  }
  ::fsync(fd);
  ::close(fd);
}

FileLock::FileLock(const fs::path& path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  held_ = fd_ >= 0 && ::flock(fd_, LOCK_EX | LOCK_NB) == 0;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

bool held_by_live_writer(const fs::path& path) {
  const FileLock lock(path);
  return lock.opened() && !lock.held();
}

bool still_named(int fd, const fs::path& path) {
  struct stat open_file {};
  struct stat named {};
  return ::fstat(fd, &open_file) == 0 && ::lstat(path.c_str(), &named) == 0 && open_file.st_dev == named.st_dev &&
         open_file.st_ino == named.st_ino;
}

namespace {

// The temporary files of open writers, for the signal handler: fixed storage, so that reading it allocates nothing
// and takes no lock (async-signal-safe). A writer that finds no free slot is cleaned at the next write instead.
struct TemporarySlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 holds a path
  char path[PATH_MAX] = {};
};
TemporarySlot g_temporaries[16];

int remember_temporary(const fs::path& path) {
  if (path.native().size() >= PATH_MAX) return -1;
  for (int i = 0; i < static_cast<int>(std::size(g_temporaries)); ++i) {
    int free = 0;
    if (g_temporaries[i].state.compare_exchange_strong(free, 1)) {
      std::memcpy(g_temporaries[i].path, path.c_str(), path.native().size() + 1);
      g_temporaries[i].state.store(2);
      return i;
    }
  }
  return -1;
}

void forget_temporary(int slot) {
  if (slot >= 0) g_temporaries[slot].state.store(0);
}

extern "C" void remove_temporaries_and_end(int signal_number) {
  for (auto& slot : g_temporaries) {
    if (slot.state.load() == 2) ::unlink(slot.path);
  }
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);  // delivered once the handler returns: the process ends as it would have
}

// The hint that goes with a failed write, create or flush.
std::string write_failure_hint(int error) {
  switch (error) {
    case ENOSPC:
      return "the disk is full; free space or write elsewhere";
    case EDQUOT:
      return "the disk quota is used up; free space or write elsewhere";
    case EFBIG:
      return "the file would pass the largest size this process may write (ulimit -f) or the file system takes; "
             "raise the limit or write elsewhere";
    case EPIPE:
      return "the process reading it has stopped";
    case EROFS:
      return "the file system is read-only; write elsewhere";
    default:
      return "check the disk (full, read-only or failing)";
  }
}

[[noreturn]] void throw_write_failure(const std::string& what, const fs::path& path, int error) {
  throw std::runtime_error(what + " '" + path.string() + "': " + std::strerror(error) + "; " +
                           write_failure_hint(error));
}

// Removes the `<target>.tmp-<digits>` files beside `target` that no writer holds: their writers were killed.
void remove_dead_writers_temporaries(const fs::path& target) {
  const std::string prefix = target.filename().string() + ".tmp-";
  std::error_code error;
  fs::directory_iterator entries(target.has_parent_path() ? target.parent_path() : fs::path("."), error);
  for (; !error && entries != fs::directory_iterator(); entries.increment(error)) {
    const fs::path file = entries->path();
    const std::string name = file.filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
      continue;
    }
    const FileLock lock(file);
    struct stat st {};
    if (lock.held() && ::fstat(lock.descriptor(), &st) == 0 && S_ISREG(st.st_mode) &&
        still_named(lock.descriptor(), file)) {
      ::unlink(file.c_str());
    }
  }
}

int open_fifo_for_writing(const fs::path& path, std::chrono::milliseconds reader_wait) {
  const auto deadline = std::chrono::steady_clock::now() + reader_wait;
  for (;;) {
    // O_NONBLOCK: the open fails with ENXIO while no reader has the FIFO open, instead of waiting for ever.
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd >= 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // writes wait for the reader to take the bytes
      return fd;
    }
    if (errno != ENXIO) throw_write_failure("cannot open", path, errno);
    if (std::chrono::steady_clock::now() >= deadline) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", static_cast<double>(reader_wait.count()) / 1000.0);
      throw std::runtime_error("cannot write '" + path.string() + "': no process opened this FIFO for reading within " +
                               seconds + " s; start its reader first");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

void remove_temporary_files_on_signals() {
  for (const int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current {};
    if (::sigaction(signal_number, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) continue;
    struct sigaction action {};
    action.sa_handler = remove_temporaries_and_end;
    sigemptyset(&action.sa_mask);
    ::sigaction(signal_number, &action, nullptr);
  }
}

AtomicFileWriter::AtomicFileWriter(fs::path path, std::chrono::milliseconds fifo_reader_wait) : path_(std::move(path)) {
  const OutputTarget target = resolve_output(path_, "the output file");
  target_ = target.path;
  if (replaced_atomically(target.kind)) {
    open_temporary();
  } else {
    open_through(target.kind, fifo_reader_wait);
  }
}

void AtomicFileWriter::open_temporary() {
  remove_dead_writers_temporaries(target_);
  const fs::path temporary = temporary_file_name(target_);
  for (int attempt = 0; attempt < 50 && fd_ < 0; ++attempt) {
    fd_ = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) throw_write_failure("cannot create", temporary, errno);
    // Locked before the first byte; a cleaner that took the new file's lock first is about to remove it: again.
    if (fd_ >= 0 && (::flock(fd_, LOCK_EX | LOCK_NB) != 0 || !still_named(fd_, temporary))) {
      ::close(fd_);
      fd_ = -1;
    }
    if (fd_ < 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (fd_ < 0) {
    throw std::runtime_error("cannot create '" + temporary.string() +
                             "': another writer of this process holds it; write each file once at a time");
  }
  temp_path_ = temporary;
  signal_slot_ = remember_temporary(temp_path_);
  struct stat replaced {};
  if (::stat(target_.c_str(), &replaced) == 0 && S_ISREG(replaced.st_mode)) {
    ::fchmod(fd_, replaced.st_mode & 07777);  // the new version keeps the permissions of the one it replaces
  }
}

void AtomicFileWriter::open_through(OutputKind kind, std::chrono::milliseconds fifo_reader_wait) {
  if (kind == OutputKind::kFifo) {
    fd_ = open_fifo_for_writing(target_, fifo_reader_wait);
  } else {
    // Never O_TRUNC or O_CREAT: a device is not a file to empty, and a descriptor's file (/dev/stdout redirected
    // with >>) is appended to, as the shell's own writes are.
    const int append = kind == OutputKind::kDescriptor ? O_APPEND : 0;
    fd_ = ::open(target_.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC | append);
    if (fd_ < 0) throw_write_failure("cannot open", path_, errno);
  }
  struct stat st {};
  if (kind != OutputKind::kDescriptor &&
      (::fstat(fd_, &st) != 0 || (kind == OutputKind::kFifo ? !S_ISFIFO(st.st_mode) : !S_ISCHR(st.st_mode)))) {
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error("cannot write '" + path_.string() + "': it was replaced while it was opened");
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
  forget_temporary(signal_slot_);
}

void AtomicFileWriter::write(const void* data, std::size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, bytes, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_write_failure("cannot write", path_, errno);
    }
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  if (writes_through()) {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0 && errno != EINTR) throw_write_failure("cannot write", path_, errno);
    committed_ = true;
    return;
  }
  if (::fsync(fd_) != 0) throw_write_failure("cannot flush to disk", temp_path_, errno);
  // Renamed while the lock is held: another writer of the same target would take an unlocked temporary for a dead
  // writer's and remove it.
  if (::rename(temp_path_.c_str(), target_.c_str()) != 0) {
    throw std::runtime_error("cannot rename '" + temp_path_.string() + "' to '" + target_.string() +
                             "': " + errno_text());
  }
  committed_ = true;
  ::close(fd_);
  fd_ = -1;
  forget_temporary(signal_slot_);
  signal_slot_ = -1;
  fsync_directory(target_.has_parent_path() ? target_.parent_path() : fs::path("."));
}

void write_file_atomic(const fs::path& path, std::string_view data) {
  AtomicFileWriter writer(path);
  writer.write(data.data(), data.size());
  writer.commit();
}

void write_json_file_atomic(const fs::path& path, const nlohmann::json& value) {
  write_file_atomic(path, value.dump(2) + "\n");
}

}  // namespace fitsum::util
