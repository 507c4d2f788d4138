// Small helpers shared by the loaders and writers: opening what a name resolves to only when it is a regular file,
// whole-file reads with a size bound, JSON files with a nesting bound and the parse position, read-only mappings,
// atomic writes (temporary name, fsync, rename) so that a crash never leaves a file that looks complete but is
// not, and the locks that tell a live writer's temporary files from a dead one's.
//
// Names read may be symbolic links (Hugging Face's cache links snapshots/<rev>/model.safetensors to
// ../../blobs/<hash>), but what they resolve to must be a regular file: a FIFO would block forever, a device
// (/dev/zero) never ends, and a folder reads as an obscure error. Each is refused by name before anything is read.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "fitsum/util/output_paths.h"

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

// Writes `data` to `path` with an AtomicFileWriter (below): atomically where `path` is (or resolves to) a regular
// file or names a new one, through it where it is a FIFO or a device.
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

// An exclusive advisory lock (flock) on a file or a folder, taken without waiting and released with the object. A
// flock belongs to the open file and vanishes with the process that took it, however that process ends (kill -9
// too): it tells whether the writer of a temporary file or folder still runs, where the pid in its name may by now
// belong to any other process.
class FileLock {
 public:
  // Opens `path` (not following a final symbolic link, never blocking on a FIFO) and tries to lock it.
  explicit FileLock(const fs::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  bool opened() const { return fd_ >= 0; }  // false: `path` could not be opened (it is gone, say)
  bool held() const { return held_; }       // false: another open file holds the lock, or nothing was opened
  int descriptor() const { return fd_; }

 private:
  int fd_ = -1;
  bool held_ = false;
};

// Whether a live process holds the lock on `path`, a temporary file or folder whose writer takes a FileLock on it
// for its whole life (AtomicFileWriter does). False when nobody holds it, because its writer died or never locked
// it: the caller may remove it, best while holding a FileLock of its own on it so that nobody takes it meanwhile.
bool held_by_live_writer(const fs::path& path);

// Whether the open file `fd` is still the file named `path` (not following a final symbolic link): a name removed or
// replaced between opening and locking leaves a lock on a file nobody else will look at.
bool still_named(int fd, const fs::path& path);

// Makes SIGINT, SIGTERM and SIGHUP remove the temporary files of the AtomicFileWriters still open before they end
// the process as they would have (their default action, so the exit status is unchanged). Signals whose action is
// not the default when this is called are left alone; a handler installed later (training's stop request) takes
// precedence while it is installed.
void remove_temporary_files_on_signals();

// How long a writer waits for a process to open a FIFO for reading before it gives up.
constexpr std::chrono::milliseconds kFifoReaderWait{60000};

// The writer of every file fitsum produces. What the name resolves to decides how (util/output_paths.h):
// - a regular file, or a name that does not exist yet: the bytes go to `<target>.tmp-<pid>` beside it, and
//   `commit()` fsyncs it and renames it over the target, so that a reader never sees a partial file; through a
//   symbolic link, the link's target is replaced and the link stays. Destroying an uncommitted writer removes the
//   temporary file. The writer holds a FileLock on its temporary file for its whole life, and removes the
//   temporaries of the same target that nobody holds (left by a writer that was killed) when it starts.
// - a FIFO, a character device (/dev/null) or an open descriptor (/dev/stdout): written through, never replaced;
//   opened without truncation or creation (a descriptor in append mode), closed by `commit()`. A FIFO's open waits
//   at most `fifo_reader_wait` for a reader.
// Failed writes name the file and the cause (a full disk, the size limit of `ulimit -f`) in a std::runtime_error.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(fs::path path, std::chrono::milliseconds fifo_reader_wait = kFifoReaderWait);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, std::size_t size);
  void commit();
  const fs::path& path() const { return path_; }
  // True for a FIFO, a device or a descriptor, which are written through rather than replaced.
  bool writes_through() const { return temp_path_.empty(); }

 private:
  void open_temporary();
  void open_through(OutputKind kind, std::chrono::milliseconds fifo_reader_wait);

  fs::path path_;       // as given
  fs::path target_;     // its symbolic links resolved: what the rename replaces, or what is written through
  fs::path temp_path_;  // empty when written through
  int fd_ = -1;
  int signal_slot_ = -1;  // where remove_temporary_files_on_signals finds the temporary file
  bool committed_ = false;
};

}  // namespace fitsum::util
