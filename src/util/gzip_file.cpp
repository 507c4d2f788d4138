// Implements include/fitsum/util/gzip_file.h over zlib's gzFile and util/data_file_stream.h.
#include "fitsum/util/gzip_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <zlib.h>

#include "fitsum/util/data_file_stream.h"

namespace fitsum::util {

void write_gzip_file(const std::filesystem::path& path, std::string_view data) {
  const auto temporary = path.string() + ".partial";
  gzFile file = gzopen(temporary.c_str(), "wb6");
  if (file == nullptr) {
    throw std::runtime_error("cannot write '" + path.string() + "': " + std::strerror(errno));
  }
  bool ok = true;
  constexpr std::size_t kChunk = std::size_t{1} << 24;  // gzwrite takes an unsigned length
  for (std::size_t at = 0; ok && at < data.size(); at += kChunk) {
    const auto n = static_cast<unsigned>(std::min(kChunk, data.size() - at));
    ok = gzwrite(file, data.data() + at, n) == static_cast<int>(n);
  }
  ok = gzclose(file) == Z_OK && ok;
  std::error_code error;
  if (ok) std::filesystem::rename(temporary, path, error);
  if (!ok || error) {
    std::filesystem::remove(temporary, error);
    throw std::runtime_error("writing '" + path.string() + "' failed (disk full?)");
  }
}

std::string read_text_file(const std::filesystem::path& path, std::string_view what, std::uint64_t max_bytes) {
  DataFileStream stream(path, what);
  std::string text, line;
  bool overlong = false;
  while (stream.read_line(line, max_bytes, overlong)) {
    if (overlong || text.size() + line.size() + 1 > max_bytes) {
      throw std::runtime_error(std::string(what) + " '" + path.string() + "' is larger than " +
                               std::to_string(max_bytes) + " bytes of text");
    }
    text += line;
    text += '\n';
  }
  return text;
}

}  // namespace fitsum::util
