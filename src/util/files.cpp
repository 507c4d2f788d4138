// Implements include/fitsum/util/files.h with POSIX calls where durability matters (fsync, rename).
#include "fitsum/util/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace fitsum::util {

namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot open '" + path.string() + "': " + errno_text());
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) {
    throw std::runtime_error("cannot read '" + path.string() + "': " + errno_text());
  }
  return buffer.str();
}

nlohmann::json read_json_file(const fs::path& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error("'" + path.string() + "' is not valid JSON (byte " + std::to_string(e.byte) +
                             "): " + e.what());
  }
}

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
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
      throw std::runtime_error("cannot write '" + temp_path_.string() + "': " + errno_text());
    }
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  if (::fsync(fd_) != 0) {
    throw std::runtime_error("cannot flush '" + temp_path_.string() + "': " + errno_text());
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
