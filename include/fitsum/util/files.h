// Small helpers shared by the loaders and writers: opening what a name resolves to only when it is a regular file,
// whole-file reads with a size bound, JSON files with a nesting bound and the parse position, read-only mappings,
// and atomic writes (temporary name, fsync, rename) so that a crash never leaves a file that looks complete but is
// not.
//
// Names may be symbolic links (Hugging Face's cache links snapshots/<rev>/model.safetensors to ../../blobs/<hash>),
// but what they resolve to must be a regular file: a FIFO would block forever, a device (/dev/zero) never ends, and
// a folder reads as an obscure error. Each is refused by name before anything is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace fitsum::util {

namespace fs = std::filesystem;

// Largest file read_file reads whole unless told otherwise, and the bounds of every JSON document fitsum reads
// (config.json, generation_config.json, *.index.json, trainer_state.json, data records, safetensors headers). Real
// documents are far below both: HF configs nest 3 deep, a pre-tokenized record 2.
constexpr std::uint64_t kMaxReadFileBytes = std::uint64_t{1} << 30;    // 1 GiB
constexpr std::uint64_t kMaxJsonFileBytes = std::uint64_t{256} << 20;  // 256 MiB
constexpr int kMaxJsonDepth = 64;

// "a FIFO", "a directory", "a character device", ... for a file that is not regular; "" for a regular file.
std::string file_kind_problem(const fs::path& path);

// Whether `dir / name` resolves to a regular file (symbolic links followed); false on any error.
bool folder_has_file(const fs::path& dir, std::string_view name);

// Throws std::runtime_error naming `what` (e.g. "config.json", "the data file") and `path` unless the path resolves
// to a regular file (symbolic links followed), with the reason: missing, a folder, a FIFO, a device.
void require_regular_file(const fs::path& path, std::string_view what);

// A regular file opened for reading. The type is checked before opening (so a device is never opened) and again on
// the open descriptor (so nothing can be swapped in between); the open itself never blocks.
class ReadableFile {
 public:
  ReadableFile(const fs::path& path, std::string_view what);
  ~ReadableFile();
  ReadableFile(const ReadableFile&) = delete;
  ReadableFile& operator=(const ReadableFile&) = delete;

  // Reads up to `size` bytes from the current position; 0 at the end of the file. Throws on a read error.
  std::size_t read_some(void* buffer, std::size_t size);
  int descriptor() const { return fd_; }
  std::uint64_t size() const { return size_; }  // at open time
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  std::string what_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// A read-only private mapping of a whole regular file. The bytes stay valid while the object lives.
class MappedFile {
 public:
  MappedFile(const fs::path& path, std::string_view what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  std::size_t size() const { return size_; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

// Reads a whole regular file; throws std::runtime_error naming the file when it cannot be opened or read, is not a
// regular file, or is larger than `max_bytes` (checked before any allocation).
std::string read_file(const fs::path& path, std::uint64_t max_bytes = kMaxReadFileBytes);

// JSON that cannot be used: what() names the source and says why; reason() says only why.
class JsonError : public std::runtime_error {
 public:
  JsonError(const std::string& source, std::string reason);
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

// Parses JSON text; `source` (a file name, or "file:line") names it in errors. A syntax error gives the byte
// offset; nesting deeper than `max_depth` is refused while parsing, before it can exhaust the stack of any later
// recursive walk (copy, dump, comparison). Throws JsonError.
nlohmann::json parse_json(std::string_view text, const std::string& source, int max_depth = kMaxJsonDepth);

// Parses a JSON file with the bounds above.
nlohmann::json read_json_file(const fs::path& path, std::uint64_t max_bytes = kMaxJsonFileBytes);

// Writes `data` to `path` atomically: a temporary file beside it, fsync, rename over `path`, fsync of the folder.
void write_file_atomic(const fs::path& path, std::string_view data);

// Serialises JSON with a 2-space indent and a trailing newline, as Hugging Face writes config files.
void write_json_file_atomic(const fs::path& path, const nlohmann::json& value);

// Checks, before any long work, that files can be created in `dir` (`what` names it in the error, e.g. "output_dir"):
// with `create`, a missing folder is created first; otherwise it must exist. Creates and removes a probe file, which
// also catches read-only mounts and full disks that permission bits do not show. Throws std::runtime_error.
void require_writable_folder(const fs::path& dir, std::string_view what, bool create);

// Bytes an unprivileged writer may still put into the file system that holds `dir` (statvfs: available blocks x
// fragment size), or nothing when the file system does not say (the caller then has no number to check against).
std::optional<std::uint64_t> free_disk_bytes(const fs::path& dir);

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
