// A data file (records, predictions) read as a stream of text bytes, in blocks, counting lines, whether it is stored
// plain or gzip-compressed. A gzip file is recognized by its first two bytes (1f 8b) whatever its name, as `gzip -d`
// and Hugging Face `datasets` recognize one, and is inflated through zlib as it is read: memory stays at two blocks
// however far the file inflates, so a gzip bomb costs reading time, as a huge plain file does, never memory. Several
// gzip members one after the other (`cat a.gz b.gz`) read as their texts one after the other, as gzip reads them.
// A UTF-8 byte order mark at the start of the text is skipped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fitsum::util {

namespace fs = std::filesystem;

class DataFileStream {
 public:
  // Opens `file` (a regular file, see ReadableFile; `what` names it in errors, e.g. "the data file"). Throws
  // std::runtime_error when it cannot be opened or read, or when its gzip stream is corrupt or cut short: the
  // message names the file and says how far its text got.
  DataFileStream(const fs::path& file, std::string_view what);
  ~DataFileStream();
  DataFileStream(const DataFileStream&) = delete;
  DataFileStream& operator=(const DataFileStream&) = delete;

  static constexpr int kEnd = -1;

  // The next byte of text (0..255) without consuming it; kEnd at the end of the text.
  int peek() {
    if (position_ == size_ && !fill()) return kEnd;
    return static_cast<unsigned char>(buffer_[position_]);
  }
  // The next byte of text, consumed; kEnd at the end. A '\n' starts the next line.
  int get() {
    const int c = peek();
    if (c != kEnd) {
      ++position_;
      if (c == '\n') ++line_;
    }
    return c;
  }

  // The rest of the current line without its '\n'; false at the end of the text. A line longer than `max` bytes is
  // consumed whole but not kept: `overlong` says so.
  bool read_line(std::string& line, std::size_t max, bool& overlong);
  // Consumes spaces, tabs and line breaks.
  void skip_whitespace();

  std::size_t line() const { return line_; }  // 1-based line of the next byte
  const fs::path& file() const;
  bool compressed() const;  // whether the file is gzip

  class Source;  // the text's bytes: the file's as they are, or inflated (data_file_stream.cpp)

 private:
  bool fill();

  std::unique_ptr<Source> source_;
  std::vector<char> buffer_;
  std::size_t position_ = 0;
  std::size_t size_ = 0;
  std::size_t line_ = 1;
};

}  // namespace fitsum::util
