// Implements include/fitsum/util/files.h with POSIX calls where it matters: stat before open and fstat after it
// (the file type), O_NONBLOCK (a FIFO never blocks the open), fsync and rename (durability).
#include "fitsum/util/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

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

AtomicFileWriter::AtomicFileWriter(fs::path path) : path_(std::move(path)) {
  temp_path_ = path_;
  temp_path_ += ".tmp-" + std::to_string(::getpid());
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw std::runtime_error("cannot create '" + temp_path_.string() + "': " + errno_text());
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
  if (!committed_) {
    std::error_code ignored;
    fs::remove(temp_path_, ignored);
  }
}

void AtomicFileWriter::write(const void* data, std::size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, bytes, size);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw std::runtime_error("cannot write '" + temp_path_.string() + "': " + errno_text() +
                               "; check the disk (full, read-only or failing)");
    }
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  if (::fsync(fd_) != 0) {
    throw std::runtime_error("cannot flush '" + temp_path_.string() + "' to disk: " + errno_text() +
                             "; check the disk (full or failing)");
  }
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    throw std::runtime_error("cannot rename '" + temp_path_.string() + "' to '" + path_.string() +
                             "': " + errno_text());
  }
  committed_ = true;
  fsync_directory(path_.has_parent_path() ? path_.parent_path() : fs::path("."));
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
