// What an output file the user names (--predictions_file, --output_file, --memory_report, ...) resolves to, and the
// checks every command runs on its output files before it loads anything.
//
// A name is written the way every Unix tool writes it: a regular file (or a name that does not exist yet) is
// replaced atomically (a temporary file beside it, then a rename); a symbolic link is followed, and its target is
// what gets replaced, so the link stays a link; a FIFO, a character device (/dev/null, a terminal) and a descriptor
// named through /proc (/dev/stdout, /dev/fd/N) are opened and written through, never replaced by a regular file.
// Folders, block devices and sockets are refused.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace fitsum::util {

namespace fs = std::filesystem;

enum class OutputKind {
  kNewFile,          // nothing there yet: created through a temporary file and a rename
  kRegularFile,      // replaced through a temporary file and a rename
  kFifo,             // written through, once a reader has opened it
  kCharacterDevice,  // written through (/dev/null, a terminal)
  kDescriptor,       // an open descriptor named through /proc (/dev/stdout, /dev/fd/N): written through, appending
};

struct OutputTarget {
  fs::path path;  // where the bytes go: the name with its symbolic links resolved (the name itself for kDescriptor)
  OutputKind kind = OutputKind::kNewFile;
};

// Whether the target is replaced through a temporary file (a new or regular file) rather than written through.
inline bool replaced_atomically(OutputKind kind) {
  return kind == OutputKind::kNewFile || kind == OutputKind::kRegularFile;
}

// Follows `path`'s symbolic links (at most 40) and says how it is written. Throws std::runtime_error naming `what`
// (a flag, or the file's role) for a folder, a block device, a socket, a name ending in '/', or a link loop.
OutputTarget resolve_output(const fs::path& path, std::string_view what);

// The temporary file an atomic write of `target` goes through: `<target>.tmp-<pid>`, beside it.
fs::path temporary_file_name(const fs::path& target);

// Checks, before any long work, that the output file `path` can be written (`flag` names it in the error, e.g.
// "--predictions_file"): what it resolves to is writable (above), and for a new or regular file its folder exists
// and takes a new file under the temporary name (which also catches a name too long for the file system once the
// `.tmp-<pid>` suffix is added, read-only mounts and full disks). Opens no FIFO or device. Throws
// std::runtime_error.
void require_writable_output_file(const fs::path& path, std::string_view flag);

// A file named on the command line: the flag and its value ("" when the flag was not given).
struct NamedPath {
  std::string flag;
  fs::path path;
};

// The check every command runs on its files before it loads anything: each output passes
// require_writable_output_file, and none is the same file as an input (the same inode, through any links or hard
// links, or the same resolved name when it does not exist yet) or as another output replaced atomically. A
// conflict is std::invalid_argument naming both flags; the rest std::runtime_error. Paths left empty are skipped.
void require_output_files(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

}  // namespace fitsum::util
