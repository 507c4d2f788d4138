// Implements include/fitsum/util/output_paths.h with lstat and readlink, one link at a time: the type of what a name
// resolves to decides how it is written, and nothing is opened to find out (opening a FIFO and closing it again would
// end its reader's input).
#include "fitsum/util/output_paths.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace fitsum::util {

namespace {

// Linux's own bound on symbolic links followed in one lookup (MAXSYMLINKS).
constexpr int kMaxLinks = 40;

std::string errno_text() { return std::strerror(errno); }

[[noreturn]] void refuse(std::string_view what, const fs::path& path, const std::string& why) {
  throw std::runtime_error(std::string(what) + " '" + path.string() + "' " + why);
}

// Whether the symbolic link `link` lives in /proc (/proc/<pid>/fd/N, named directly or through /dev/stdout or
// /dev/fd/N): it names an open descriptor, whose target (a pipe, a socket, a deleted file) need not be a path.
bool names_a_descriptor(const fs::path& link) {
  std::error_code error;
  const auto folder = fs::weakly_canonical(link.has_parent_path() ? link.parent_path() : fs::path("."), error);
  const std::string text = folder.string();
  return !error && (text == "/proc" || text.rfind("/proc/", 0) == 0);
}

OutputTarget classify(const fs::path& original, const fs::path& resolved, mode_t mode, std::string_view what) {
  if (S_ISREG(mode)) return {resolved, OutputKind::kRegularFile};
  if (S_ISFIFO(mode)) return {resolved, OutputKind::kFifo};
  if (S_ISCHR(mode)) return {resolved, OutputKind::kCharacterDevice};
  if (S_ISDIR(mode)) refuse(what, original, "is a folder; name a file inside it");
  const std::string kind = S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket" : "not a regular file";
  refuse(what, original, "is " + kind + "; fitsum writes regular files, FIFOs and character devices such as /dev/null");
}

// What stat says identifies a file (device and inode); a name that does not exist is identified by its resolved
// absolute name, so that two outputs or an output and an input that are both still to be created compare equal.
struct FileIdentity {
  bool exists = false;
  dev_t device = 0;
  ino_t inode = 0;
  fs::path name;
};

FileIdentity identity_of(const fs::path& path) {
  FileIdentity identity;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    identity.exists = true;
    identity.device = st.st_dev;
    identity.inode = st.st_ino;
    return identity;
  }
  std::error_code error;
  identity.name = fs::weakly_canonical(fs::absolute(path, error), error);
  if (error) identity.name = path.lexically_normal();
  return identity;
}

bool same_file(const FileIdentity& a, const FileIdentity& b) {
  if (a.exists != b.exists) return false;
  return a.exists ? a.device == b.device && a.inode == b.inode : a.name == b.name;
}

std::string named(const NamedPath& file) { return file.flag + " '" + file.path.string() + "'"; }

}  // namespace

OutputTarget resolve_output(const fs::path& path, std::string_view what) {
  if (path.empty()) throw std::invalid_argument(std::string(what) + " is empty; name a file");
  fs::path current = path;
  for (int links = 0;; ++links) {
    struct stat st {};
    if (::lstat(current.c_str(), &st) != 0) {
      // Missing, or under a non-folder, or a name too long: a new file, whose folder the write checks.
      if (errno != ENOENT && errno != ENOTDIR && errno != ENAMETOOLONG) {
        refuse(what, path, "cannot be examined (" + errno_text() + ")");
      }
      if (!current.has_filename()) refuse(what, path, "ends with '/', which names a folder; name a file");
      return {current, OutputKind::kNewFile};
    }
    if (!S_ISLNK(st.st_mode)) return classify(path, current, st.st_mode, what);
    if (links == kMaxLinks) refuse(what, path, "has symbolic links that form a loop; name a file");
    if (names_a_descriptor(current)) return {path, OutputKind::kDescriptor};
    std::error_code error;
    const fs::path target = fs::read_symlink(current, error);
    if (error) refuse(what, path, "cannot be followed (" + error.message() + ")");
    current = target.is_absolute() ? target : current.parent_path() / target;
  }
}

fs::path temporary_file_name(const fs::path& target) {
  fs::path temporary = target;
  temporary += ".tmp-" + std::to_string(::getpid());
  return temporary;
}

void require_writable_output_file(const fs::path& path, std::string_view flag) {
  const OutputTarget target = resolve_output(path, flag);
  if (!replaced_atomically(target.kind)) {
    if (::access(target.path.c_str(), W_OK) != 0) refuse(flag, path, "is not writable (" + errno_text() + ")");
    return;
  }
  const fs::path folder = target.path.has_parent_path() ? target.path.parent_path() : fs::path(".");
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0) {
    if (errno == ENOENT) refuse(flag, path, "cannot be written: its folder '" + folder.string() + "' does not exist");
    refuse(flag, path,
           "cannot be written: its folder '" + folder.string() + "' cannot be examined (" + errno_text() + ")");
  }
  if (!S_ISDIR(st.st_mode)) refuse(flag, path, "cannot be written: '" + folder.string() + "' is not a folder");
  // The very name the write goes through: a name the file system takes without the suffix but not with it failed
  // only after all the work.
  const fs::path probe = temporary_file_name(target.path);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
    return;
  }
  if (errno == EEXIST) return;  // another writer's temporary, or a dead one's, which the write removes
  if (errno == ENAMETOOLONG) {
    const long limit = ::pathconf(folder.c_str(), _PC_NAME_MAX);
    refuse(flag, path,
           "has a name too long to write: fitsum writes it under the name plus '" + probe.extension().string() +
               "' first (" + std::to_string(probe.filename().string().size()) +
               " bytes) and the file system takes names of " +
               (limit > 0 ? "at most " + std::to_string(limit) + " bytes" : "fewer bytes") + "; choose a shorter name");
  }
  refuse(flag, path,
         "cannot be written: its folder '" + folder.string() + "' takes no new file (" + errno_text() +
             "); choose a folder you can write to");
}

void require_output_files(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  std::vector<std::pair<const NamedPath*, OutputTarget>> earlier;
  for (const NamedPath& output : outputs) {
    if (output.path.empty()) continue;
    require_writable_output_file(output.path, output.flag);
    const OutputTarget target = resolve_output(output.path, output.flag);
    const FileIdentity identity = identity_of(target.path);
    for (const NamedPath& input : inputs) {
      if (!input.path.empty() && same_file(identity, identity_of(input.path))) {
        throw std::invalid_argument(named(output) + " is the same file as " + named(input) +
                                    ": writing it would destroy the input; choose another name");
      }
    }
    // Two outputs may both be /dev/null or one FIFO (written one after the other); two files would overwrite.
    for (const auto& [other, other_target] : earlier) {
      if (replaced_atomically(target.kind) && replaced_atomically(other_target.kind) &&
          same_file(identity, identity_of(other_target.path))) {
        throw std::invalid_argument(named(*other) + " and " + named(output) +
                                    " are the same file: the second would overwrite the first; choose two names");
      }
    }
    earlier.emplace_back(&output, target);
  }
}

}  // namespace fitsum::util
