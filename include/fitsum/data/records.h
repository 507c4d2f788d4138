// Streams the records of a dataset file, one at a time, so that large files are never read whole:
//   .jsonl / .ndjson  one JSON object per line (blank lines ignored);
//   .json             an array of objects, or an object whose "data" field is that array (other fields are
//                     skipped), or JSON Lines saved under a .json name, as `datasets` also accepts;
//   .csv              RFC 4180 with a header row: comma-separated, fields in double quotes may hold commas,
//                     doubled quotes and line breaks (as `datasets`/pandas export them). Cells are strings.
// Any of them may be gzip-compressed, recognized by its content whatever its name (`x.jsonl.gz` is jsonl, and so is
// a gzip file named `x.jsonl`), and inflated as it is read (util/data_file_stream.h). The text must be UTF-8, as
// `datasets` requires: a record holding an invalid byte is a BadRecord naming its line.
// A record is a JSON object plus the line it starts on, so that every later error can name file and line.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fitsum::data {

namespace fs = std::filesystem;

enum class FileFormat { kJsonLines, kJson, kCsv };

// The format a file's extension names (before a trailing .gz); throws std::invalid_argument for other extensions.
FileFormat format_of(const fs::path& file);
const char* to_string(FileFormat format);

struct Record {
  nlohmann::json fields;  // an object; csv cells are strings
  std::size_t line = 0;   // 1-based line of the file where the record starts
};

// One record that cannot be used (not UTF-8, not JSON, not an object, a csv row with the wrong number of cells, a
// field of the wrong type). The message starts with "file:line:". --skip_bad_records skips these and counts them.
class BadRecord : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RecordReader {
 public:
  // Opens `file` in the format its extension names; throws std::runtime_error if it cannot be opened. A broken gzip
  // stream (corrupt, cut short) is a std::runtime_error naming the file, from here or from next().
  explicit RecordReader(const fs::path& file);
  ~RecordReader();
  RecordReader(RecordReader&&) noexcept;
  RecordReader& operator=(RecordReader&&) noexcept;

  // Reads the next record; false at the end of the file. Throws BadRecord for a malformed record (the reader stays
  // usable and continues after it) and std::runtime_error when the file's structure is broken beyond one record.
  bool next(Record& record);

  FileFormat format() const { return format_; }
  const fs::path& file() const { return file_; }

  // A line-oriented reader and the scanners share this interface; each lives in records.cpp.
  class Source;

 private:
  fs::path file_;
  FileFormat format_;
  std::unique_ptr<Source> source_;
};

}  // namespace fitsum::data
