// Small file helpers shared by the loaders and writers: whole-file reads with errors that name the file, JSON
// files with the parse position, and atomic writes (temporary name, fsync, rename) so that a crash never leaves a
// file that looks complete but is not.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace fitsum::util {

namespace fs = std::filesystem;

// Reads a whole file; throws std::runtime_error naming the file when it cannot be opened or read.
std::string read_file(const fs::path& path);

// Parses a JSON file; a syntax error names the file and the byte offset.
nlohmann::json read_json_file(const fs::path& path);

// Writes `data` to `path` atomically: a temporary file beside it, fsync, rename over `path`, fsync of the folder.
void write_file_atomic(const fs::path& path, std::string_view data);

// Serialises JSON with a 2-space indent and a trailing newline, as Hugging Face writes config files.
void write_json_file_atomic(const fs::path& path, const nlohmann::json& value);

// Flushes a folder's entries (after renames inside it) to stable storage.
void fsync_directory(const fs::path& dir);

// A writer for large files: writes to `<path>.tmp-<pid>`, and `commit()` fsyncs and renames it over `path`.
// Destroying an uncommitted writer removes the temporary file, so a failed save leaves `path` untouched.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(fs::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, std::size_t size);
  void commit();
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  fs::path temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace fitsum::util
