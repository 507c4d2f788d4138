// Implements include/fitsum/data/records.h: a buffered character stream that counts lines, and three sources on
// top of it (JSON Lines, a streamed JSON array, RFC 4180 csv). Each reads one record per call.
#include "fitsum/data/records.h"

#include <algorithm>
#include <cctype>
#include <fstream>

namespace fitsum::data {

class RecordReader::Source {
 public:
  virtual ~Source() = default;
  virtual bool next(Record& record) = 0;
};

namespace {

std::string lowercase_extension(const fs::path& file) {
  std::string extension = file.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension;
}

std::string where(const fs::path& file, std::size_t line) { return file.string() + ":" + std::to_string(line); }

// Reads a file in 1 MiB blocks and hands out characters, counting lines ('\n').
class CharStream {
 public:
  explicit CharStream(const fs::path& file) : file_(file), in_(file, std::ios::binary), buffer_(1 << 20) {
    if (!in_) {
      throw std::runtime_error("cannot open '" + file.string() + "'");
    }
    // A UTF-8 byte order mark (as some Windows tools write) is not part of the data.
    if (peek() == 0xEF) {
      const std::size_t saved = position_;
      if (get() == 0xEF && get() == 0xBB && get() == 0xBF) {
        return;
      }
      position_ = saved;
    }
  }

  static constexpr int kEnd = -1;

  int peek() {
    if (position_ == size_ && !fill()) {
      return kEnd;
    }
    return static_cast<unsigned char>(buffer_[position_]);
  }

  int get() {
    const int c = peek();
    if (c != kEnd) {
      ++position_;
      if (c == '\n') {
        ++line_;
      }
    }
    return c;
  }

  void skip_whitespace() {
    for (int c = peek(); c == ' ' || c == '\t' || c == '\n' || c == '\r'; c = peek()) {
      get();
    }
  }

  std::size_t line() const { return line_; }
  const fs::path& file() const { return file_; }

 private:
  bool fill() {
    in_.read(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    size_ = static_cast<std::size_t>(in_.gcount());
    position_ = 0;
    if (in_.bad()) {
      throw std::runtime_error("cannot read '" + file_.string() + "'");
    }
    return size_ > 0;
  }

  fs::path file_;
  std::ifstream in_;
  std::vector<char> buffer_;
  std::size_t position_ = 0;
  std::size_t size_ = 0;
  std::size_t line_ = 1;
};

// Parses one record's text; anything but a JSON object is a BadRecord.
nlohmann::json parse_record(const std::string& text, const fs::path& file, std::size_t line) {
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw BadRecord(where(file, line) + ": not valid JSON (" + e.what() + ")");
  }
  if (!value.is_object()) {
    throw BadRecord(where(file, line) + ": a record must be a JSON object with named fields, found " +
                    std::string(value.type_name()));
  }
  return value;
}

class JsonLinesSource : public RecordReader::Source {
 public:
  explicit JsonLinesSource(const fs::path& file) : file_(file), in_(file, std::ios::binary) {
    if (!in_) {
      throw std::runtime_error("cannot open '" + file.string() + "'");
    }
  }

  bool next(Record& record) override {
    std::string line;
    while (std::getline(in_, line)) {
      ++line_number_;
      if (line_number_ == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) {
        line.erase(0, 3);
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) {
        continue;
      }
      record.line = line_number_;
      record.fields = parse_record(line, file_, line_number_);
      return true;
    }
    if (in_.bad()) {
      throw std::runtime_error("cannot read '" + file_.string() + "' after line " + std::to_string(line_number_));
    }
    return false;
  }

 private:
  fs::path file_;
  std::ifstream in_;
  std::size_t line_number_ = 0;
};

// Streams the elements of a top-level JSON array (or of the "data" array of a top-level object): each element's
// text is cut out by matching brackets outside strings and parsed on its own.
class JsonArraySource : public RecordReader::Source {
 public:
  explicit JsonArraySource(const fs::path& file) : stream_(file) {}

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
        if (stream_.peek() != CharStream::kEnd) {
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
      capture_value(key_text);
      stream_.skip_whitespace();
      if (!expect(':')) {
        return false;
      }
      stream_.skip_whitespace();
      nlohmann::json key = nlohmann::json::parse(key_text, nullptr, false);
      if (key.is_string() && key.get<std::string>() == "data") {
        if (stream_.peek() != '[') {
          throw std::runtime_error(where(stream_.file(), stream_.line()) +
                                   ": the \"data\" field must be an array of records");
        }
        stream_.get();
        return true;
      }
      std::string ignored;
      capture_value(ignored);
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
    capture_value(text);
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

  // Appends the raw text of the value at the stream's position: a string, a bracketed value, or a scalar.
  void capture_value(std::string& text) {
    const std::size_t start_line = stream_.line();
    int depth = 0;
    bool in_string = false;
    const int first = stream_.peek();
    const bool scalar = first != '{' && first != '[' && first != '"';
    for (;;) {
      const int c = stream_.peek();
      if (c == CharStream::kEnd) {
        if (scalar && depth == 0 && !text.empty()) {
          return;
        }
        throw std::runtime_error(stream_.file().string() + ": the file ends inside the value that starts at line " +
                                 std::to_string(start_line) + " (truncated file?)");
      }
      if (scalar && (c == ',' || c == ']' || c == '}' || c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
        return;
      }
      text.push_back(static_cast<char>(stream_.get()));
      if (in_string) {
        if (c == '\\') {
          const int escaped = stream_.get();
          if (escaped != CharStream::kEnd) {
            text.push_back(static_cast<char>(escaped));
          }
        } else if (c == '"') {
          in_string = false;
          if (depth == 0) {
            return;
          }
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) {
          return;
        }
      }
    }
  }

  CharStream stream_;
  bool after_record_ = false;
  bool done_ = false;
};

// RFC 4180: records end at an unquoted CRLF or LF; a quoted field may contain separators, line breaks and
// doubled quotes. The first record is the header. Blank lines are skipped.
class CsvSource : public RecordReader::Source {
 public:
  explicit CsvSource(const fs::path& file) : stream_(file) {
    std::vector<std::string> header;
    std::size_t line = 0;
    if (!read_row(header, line)) {
      throw std::runtime_error(file.string() + ": the csv file is empty; it needs a header row naming the columns");
    }
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (std::find(header.begin(), header.begin() + static_cast<std::ptrdiff_t>(i), header[i]) !=
          header.begin() + static_cast<std::ptrdiff_t>(i)) {
        throw std::runtime_error(where(file, line) + ": the header names column '" + header[i] + "' twice");
      }
    }
    columns_ = std::move(header);
  }

  bool next(Record& record) override {
    std::vector<std::string> cells;
    if (!read_row(cells, record.line)) {
      return false;
    }
    if (cells.size() != columns_.size()) {
      throw BadRecord(where(stream_.file(), record.line) + ": the row has " + std::to_string(cells.size()) +
                      " fields, the header " + std::to_string(columns_.size()) +
                      " (an unquoted comma or line break inside a field?)");
    }
    record.fields = nlohmann::json::object();
    for (std::size_t i = 0; i < cells.size(); ++i) {
      record.fields[columns_[i]] = std::move(cells[i]);
    }
    return true;
  }

 private:
  // Reads one row of cells; false at the end of the file.
  bool read_row(std::vector<std::string>& cells, std::size_t& line) {
    // Skip blank lines.
    for (int c = stream_.peek(); c == '\n' || c == '\r'; c = stream_.peek()) {
      stream_.get();
    }
    if (stream_.peek() == CharStream::kEnd) {
      return false;
    }
    line = stream_.line();
    cells.assign(1, std::string());
    bool quoted = false;
    for (;;) {
      const int c = stream_.get();
      if (c == CharStream::kEnd) {
        if (quoted) {
          throw BadRecord(where(stream_.file(), line) + ": a quoted field is never closed before the end of the file");
        }
        return true;
      }
      std::string& cell = cells.back();
      if (quoted) {
        if (c == '"') {
          if (stream_.peek() == '"') {
            stream_.get();
            cell.push_back('"');
          } else {
            quoted = false;
          }
        } else {
          cell.push_back(static_cast<char>(c));
        }
      } else if (c == '"') {
        quoted = true;  // also after other characters, as Python's csv module does
      } else if (c == ',') {
        cells.emplace_back();
      } else if (c == '\n') {
        return true;
      } else if (c == '\r' && stream_.peek() == '\n') {
        stream_.get();
        return true;
      } else {
        cell.push_back(static_cast<char>(c));
      }
    }
  }

  CharStream stream_;
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
                              "' from its extension: use .jsonl, .json or .csv");
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
  std::error_code error;
  if (!fs::is_regular_file(file, error)) {
    throw std::runtime_error("data file '" + file.string() + "' does not exist");
  }
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
