// Implements include/fitsum/data/records.h: three sources (JSON Lines, a streamed JSON array, RFC 4180 csv) on top of
// util::DataFileStream, the file's text (plain or inflated) counting lines. Each reads one record per call.
#include "fitsum/data/records.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "fitsum/util/data_file_stream.h"
#include "fitsum/util/files.h"
#include "fitsum/util/utf8.h"

namespace fitsum::data {

class RecordReader::Source {
 public:
  virtual ~Source() = default;
  virtual bool next(Record& record) = 0;
};

namespace {

// The extension that names the format: x.jsonl.gz is jsonl (compression is recognized by the content).
std::string lowercase_extension(const fs::path& file) {
  const auto lower = [](std::string text) {
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text;
  };
  const std::string extension = lower(file.extension().string());
  return extension == ".gz" ? lower(file.stem().extension().string()) : extension;
}

std::string where(const fs::path& file, std::size_t line) { return file.string() + ":" + std::to_string(line); }

// A record longer than this (a jsonl line, a json array element, a csv row) is a BadRecord: it is consumed without
// being held, so one huge record costs neither memory nor the rest of the file. 256 MiB is ~50,000 times a long
// news article.
constexpr std::size_t kMaxRecordBytes = std::size_t{256} << 20;
constexpr std::size_t kMaxCsvColumns = 10000;

std::string too_long(const fs::path& file, std::size_t line) {
  return where(file, line) + ": the record is longer than " + std::to_string(kMaxRecordBytes) +
         " bytes; split or shorten it (or pass --skip_bad_records)";
}

using util::DataFileStream;

// Hugging Face `datasets` decodes every data file as UTF-8 (pandas for csv, pyarrow or Python's json for json) and
// fails at the first invalid byte. Here that record is a BadRecord naming the line of the byte (`text` starts at
// `line`) and what holds it (`part`: "field 'x': ", "the header: "), for every format, before any tokenizer sees it.
std::string invalid_utf8(std::string_view text, const fs::path& file, std::size_t line, const std::string& part) {
  const std::size_t bad = util::find_invalid_utf8(text);
  if (bad == std::string_view::npos) return "";
  const auto lines_before = std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
  static const char* hex = "0123456789abcdef";
  const auto byte = static_cast<unsigned char>(text[bad]);
  return where(file, line + static_cast<std::size_t>(lines_before)) + ": " + part + "not valid UTF-8 (byte 0x" +
         hex[byte >> 4] + hex[byte & 15] +
         "); data files are read as UTF-8 text, as Hugging Face datasets reads them: convert the file (e.g. iconv "
         "-f latin1 -t utf-8)";
}

void require_utf8(std::string_view text, const fs::path& file, std::size_t line, const std::string& part = "") {
  if (auto message = invalid_utf8(text, file, line, part); !message.empty()) throw BadRecord(message);
}

// Parses one record's text; anything but a JSON object is a BadRecord.
nlohmann::json parse_record(const std::string& text, const fs::path& file, std::size_t line) {
  nlohmann::json value;
  try {
    value = util::parse_json(text, where(file, line));
  } catch (const util::JsonError& e) {
    throw BadRecord(where(file, line) + ": not valid JSON (" + e.reason() + ")");
  }
  if (!value.is_object()) {
    throw BadRecord(where(file, line) + ": a record must be a JSON object with named fields, found " +
                    std::string(value.type_name()));
  }
  return value;
}

class JsonLinesSource : public RecordReader::Source {
 public:
  explicit JsonLinesSource(const fs::path& file) : stream_(file, "the data file") {}

  bool next(Record& record) override {
    std::string line;
    bool overlong = false;
    for (;;) {
      const std::size_t number = stream_.line();
      if (!stream_.read_line(line, kMaxRecordBytes, overlong)) {
        return false;
      }
      if (overlong) {
        throw BadRecord(too_long(stream_.file(), number));
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) {
        continue;
      }
      record.line = number;
      require_utf8(line, stream_.file(), number);
      record.fields = parse_record(line, stream_.file(), number);
      return true;
    }
  }

 private:
  DataFileStream stream_;
};

// Streams the elements of a top-level JSON array (or of the "data" array of a top-level object): each element's
// text is cut out by matching brackets outside strings and parsed on its own.
class JsonArraySource : public RecordReader::Source {
 public:
  explicit JsonArraySource(const fs::path& file) : stream_(file, "the data file") {}

  // Positions the stream at the first record. False when the file is not an array or a {"data": [...]} object
  // but a sequence of objects, i.e. JSON Lines under a .json name.
  bool open() {
    stream_.skip_whitespace();
    const int first = stream_.peek();
    if (first == '[') {
      stream_.get();
      return true;
    }
    if (first != '{') {
      throw std::runtime_error(stream_.file().string() +
                               ": expected a JSON array of records, an object with a \"data\" array, or one "
                               "object per line");
    }
    stream_.get();
    for (bool first_key = true;; first_key = false) {
      stream_.skip_whitespace();
      if (stream_.peek() == '}') {
        stream_.get();
        stream_.skip_whitespace();
        if (stream_.peek() != DataFileStream::kEnd) {
          return false;  // another value follows: JSON Lines
        }
        throw std::runtime_error(stream_.file().string() +
                                 ": the top-level object has no \"data\" array; put the records in an array, "
                                 "under \"data\", or one object per line");
      }
      if (!first_key && !expect(',')) {
        return false;
      }
      stream_.skip_whitespace();
      std::string key_text;
      if (!capture_value(&key_text, kMaxRecordBytes)) {
        return false;
      }
      stream_.skip_whitespace();
      if (!expect(':')) {
        return false;
      }
      stream_.skip_whitespace();
      // A key is a JSON string; anything else (even nested a million deep) is simply not "data".
      const bool is_data =
          key_text.size() >= 2 && key_text.front() == '"' && nlohmann::json::parse(key_text, nullptr, false) == "data";
      if (is_data) {
        if (stream_.peek() != '[') {
          throw std::runtime_error(where(stream_.file(), stream_.line()) +
                                   ": the \"data\" field must be an array of records");
        }
        stream_.get();
        return true;
      }
      capture_value(nullptr, 0);
    }
  }

  bool next(Record& record) override {
    if (done_) {
      return false;
    }
    stream_.skip_whitespace();
    if (stream_.peek() == ']') {
      stream_.get();
      done_ = true;
      return false;
    }
    if (after_record_) {
      if (!expect(',')) {
        throw std::runtime_error(where(stream_.file(), stream_.line()) +
                                 ": expected ',' or ']' after a record; the JSON array is broken here");
      }
      stream_.skip_whitespace();
    }
    after_record_ = true;
    record.line = stream_.line();
    std::string text;
    if (!capture_value(&text, kMaxRecordBytes)) {
      throw BadRecord(too_long(stream_.file(), record.line));
    }
    require_utf8(text, stream_.file(), record.line);
    record.fields = parse_record(text, stream_.file(), record.line);
    return true;
  }

 private:
  bool expect(char c) {
    if (stream_.peek() != c) {
      return false;
    }
    stream_.get();
    return true;
  }

  // Reads the value at the stream's position (a string, a bracketed value, or a scalar) and appends its raw text
  // to `*text` (when given) up to `limit` bytes; false when the value was longer and only skipped past.
  bool capture_value(std::string* text, std::size_t limit) {
    const std::size_t start_line = stream_.line();
    std::uint64_t depth = 0;
    std::size_t length = 0;
    bool in_string = false;
    const int first = stream_.peek();
    const bool scalar = first != '{' && first != '[' && first != '"';
    const auto keep = [&](int c) {
      if (text != nullptr && ++length <= limit) text->push_back(static_cast<char>(c));
    };
    for (;;) {
      const int c = stream_.peek();
      if (c == DataFileStream::kEnd) {
        if (scalar && depth == 0 && length > 0) {
          break;
        }
        throw std::runtime_error(stream_.file().string() + ": the file ends inside the value that starts at line " +
                                 std::to_string(start_line) + " (truncated file?)");
      }
      if (scalar && (c == ',' || c == ']' || c == '}' || c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
        break;
      }
      keep(stream_.get());
      length += text == nullptr ? 1 : 0;
      if (in_string) {
        if (c == '\\') {
          const int escaped = stream_.get();
          if (escaped != DataFileStream::kEnd) {
            keep(escaped);
          }
        } else if (c == '"') {
          in_string = false;
          if (depth == 0) {
            break;
          }
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        break;
      }
    }
    return text == nullptr || length <= limit;
  }

  DataFileStream stream_;
  bool after_record_ = false;
  bool done_ = false;
};

// RFC 4180: records end at an unquoted CRLF or LF; a quoted field may contain separators, line breaks and
// doubled quotes. The first record is the header. Blank lines are skipped.
class CsvSource : public RecordReader::Source {
 public:
  explicit CsvSource(const fs::path& file) : stream_(file, "the data file") {
    std::vector<std::string> header;
    std::size_t line = 0;
    std::size_t fields = 0;
    if (!read_row(header, line, fields, kMaxCsvColumns)) {
      throw std::runtime_error(file.string() + ": the csv file is empty; it needs a header row naming the columns");
    }
    if (fields > kMaxCsvColumns) {
      throw std::runtime_error(where(file, line) + ": the header has more than " + std::to_string(kMaxCsvColumns) +
                               " columns (or is longer than " + std::to_string(kMaxRecordBytes) + " bytes)");
    }
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (auto message = invalid_utf8(header[i], file, line, "the header: "); !message.empty()) {
        throw std::runtime_error(message);
      }
      if (std::find(header.begin(), header.begin() + static_cast<std::ptrdiff_t>(i), header[i]) !=
          header.begin() + static_cast<std::ptrdiff_t>(i)) {
        throw std::runtime_error(where(file, line) + ": the header names column '" + header[i] + "' twice");
      }
    }
    columns_ = std::move(header);
  }

  bool next(Record& record) override {
    std::vector<std::string> cells;
    std::size_t fields = 0;
    if (!read_row(cells, record.line, fields, columns_.size())) {
      return false;
    }
    if (fields > columns_.size() && cells.empty()) {
      throw BadRecord(too_long(stream_.file(), record.line));
    }
    if (fields != columns_.size()) {
      throw BadRecord(where(stream_.file(), record.line) + ": the row has " + std::to_string(fields) +
                      " fields, the header " + std::to_string(columns_.size()) +
                      " (an unquoted comma or line break inside a field?)");
    }
    std::size_t line = record.line;  // where each cell starts: quoted cells may hold line breaks
    for (std::size_t i = 0; i < cells.size(); ++i) {
      require_utf8(cells[i], stream_.file(), line, "field '" + columns_[i] + "': ");
      line += static_cast<std::size_t>(std::count(cells[i].begin(), cells[i].end(), '\n'));
    }
    record.fields = nlohmann::json::object();
    for (std::size_t i = 0; i < cells.size(); ++i) {
      record.fields[columns_[i]] = std::move(cells[i]);
    }
    return true;
  }

 private:
  // Reads one row; false at the end of the file. `fields` counts its cells; at most `max_cells` cells and
  // kMaxRecordBytes bytes are kept (past either, the row is read to its end and `cells` is left short or empty).
  bool read_row(std::vector<std::string>& cells, std::size_t& line, std::size_t& fields, std::size_t max_cells) {
    // Skip blank lines.
    for (int c = stream_.peek(); c == '\n' || c == '\r'; c = stream_.peek()) {
      stream_.get();
    }
    if (stream_.peek() == DataFileStream::kEnd) {
      return false;
    }
    line = stream_.line();
    cells.assign(1, std::string());
    fields = 1;
    std::size_t bytes = 0;
    bool keep = true;
    const auto append = [&](int c) {
      if (keep && ++bytes > kMaxRecordBytes) {
        keep = false;
        fields = std::max(fields, max_cells + 1);
        cells.clear();
      }
      if (keep) cells.back().push_back(static_cast<char>(c));
    };
    bool quoted = false;
    for (;;) {
      const int c = stream_.get();
      if (c == DataFileStream::kEnd) {
        if (quoted) {
          throw BadRecord(where(stream_.file(), line) + ": a quoted field is never closed before the end of the file");
        }
        return true;
      }
      if (quoted) {
        if (c != '"') {
          append(c);
        } else if (stream_.peek() == '"') {
          stream_.get();
          append('"');
        } else {
          quoted = false;
        }
      } else if (c == '"') {
        quoted = true;  // also after other characters, as Python's csv module does
      } else if (c == ',') {
        ++fields;
        if (keep && fields <= max_cells) {
          cells.emplace_back();
        } else if (keep) {
          keep = false;  // more cells than wanted: count them, keep none
        }
      } else if (c == '\n') {
        return true;
      } else if (c == '\r' && stream_.peek() == '\n') {
        stream_.get();
        return true;
      } else {
        append(c);
      }
    }
  }

  DataFileStream stream_;
  std::vector<std::string> columns_;
};

}  // namespace

FileFormat format_of(const fs::path& file) {
  const std::string extension = lowercase_extension(file);
  if (extension == ".jsonl" || extension == ".ndjson") {
    return FileFormat::kJsonLines;
  }
  if (extension == ".json") {
    return FileFormat::kJson;
  }
  if (extension == ".csv") {
    return FileFormat::kCsv;
  }
  throw std::invalid_argument("cannot tell the format of '" + file.string() +
                              "' from its extension: use .jsonl, .json or .csv (each also gzip-compressed, e.g. "
                              ".jsonl.gz)");
}

const char* to_string(FileFormat format) {
  switch (format) {
    case FileFormat::kJsonLines:
      return "jsonl";
    case FileFormat::kJson:
      return "json";
    case FileFormat::kCsv:
      return "csv";
  }
  return "?";
}

RecordReader::RecordReader(const fs::path& file) : file_(file), format_(format_of(file)) {
  util::require_regular_file(file, "the data file");  // also checked on the opened file, by DataFileStream
  switch (format_) {
    case FileFormat::kJsonLines:
      source_ = std::make_unique<JsonLinesSource>(file);
      break;
    case FileFormat::kJson: {
      auto array = std::make_unique<JsonArraySource>(file);
      if (array->open()) {
        source_ = std::move(array);
      } else {
        source_ = std::make_unique<JsonLinesSource>(file);
      }
      break;
    }
    case FileFormat::kCsv:
      source_ = std::make_unique<CsvSource>(file);
      break;
  }
}

RecordReader::~RecordReader() = default;
RecordReader::RecordReader(RecordReader&&) noexcept = default;
RecordReader& RecordReader::operator=(RecordReader&&) noexcept = default;

bool RecordReader::next(Record& record) { return source_->next(record); }

}  // namespace fitsum::data
