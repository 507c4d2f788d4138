// Implements include/fitsum/util/data_file_stream.h: the file's bytes as they are, or inflated by zlib (gzip format,
// member after member, zero padding between members skipped as Python's gzip module skips it), behind one buffered,
// line-counting stream.
#include "fitsum/util/data_file_stream.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include "fitsum/util/files.h"

namespace fitsum::util {

namespace {

constexpr std::size_t kBlockBytes = std::size_t{1} << 20;

// A defect of the gzip stream; DataFileStream adds the file and the line its text had reached.
class GzipError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether the file starts with gzip's magic bytes, read without moving the file's offset.
bool starts_with_gzip_magic(const ReadableFile& file) {
  unsigned char magic[2] = {0, 0};
  ssize_t n = 0;
  do {
    n = ::pread(file.descriptor(), magic, sizeof(magic), 0);
  } while (n < 0 && errno == EINTR);
  return n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

}  // namespace

// Where the text comes from: the file's bytes as they are, or inflated.
class DataFileStream::Source {
 public:
  virtual ~Source() = default;
  // Up to `size` bytes of text; 0 at its end.
  virtual std::size_t read_some(char* out, std::size_t size) = 0;
  virtual bool compressed() const = 0;
  virtual const ReadableFile& file() const = 0;
};

namespace {

class PlainSource : public DataFileStream::Source {
 public:
  PlainSource(const fs::path& file, std::string_view what) : file_(file, what) {}
  std::size_t read_some(char* out, std::size_t size) override { return file_.read_some(out, size); }
  bool compressed() const override { return false; }
  const ReadableFile& file() const override { return file_; }

 private:
  ReadableFile file_;
};

class GzipSource : public DataFileStream::Source {
 public:
  explicit GzipSource(std::unique_ptr<PlainSource> raw) : raw_(std::move(raw)), input_(kBlockBytes) {
    // 16 + MAX_WBITS: the gzip wrapper (header, CRC-32 and length checked at each member's end), not zlib's.
    if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK) {
      throw std::runtime_error("cannot start zlib to read the gzip file '" + raw_->file().path().string() + "'");
    }
  }
  ~GzipSource() override { inflateEnd(&stream_); }
  GzipSource(const GzipSource&) = delete;
  GzipSource& operator=(const GzipSource&) = delete;

  bool compressed() const override { return true; }
  const ReadableFile& file() const override { return raw_->file(); }

  std::size_t read_some(char* out, std::size_t size) override {
    const auto wanted = static_cast<uInt>(std::min<std::size_t>(size, std::numeric_limits<uInt>::max()));
    stream_.next_out = reinterpret_cast<Bytef*>(out);
    stream_.avail_out = wanted;
    while (stream_.avail_out == wanted && !ended_) {
      if (stream_.avail_in == 0 && !refill()) {
        if (!between_members_) throw GzipError("the gzip stream ends early (a truncated file?)");
        ended_ = true;
        break;
      }
      if (between_members_) {
        while (stream_.avail_in > 0 && *stream_.next_in == 0) {
          ++stream_.next_in;
          --stream_.avail_in;
        }
        if (stream_.avail_in == 0) continue;
        between_members_ = false;  // what follows must be another member: inflate checks its header
      }
      const int status = inflate(&stream_, Z_NO_FLUSH);
      if (status == Z_STREAM_END) {
        between_members_ = true;
        inflateReset(&stream_);
      } else if (status == Z_MEM_ERROR) {
        throw std::bad_alloc();
      } else if (status != Z_OK && status != Z_BUF_ERROR) {
        throw GzipError(std::string("the gzip stream is corrupt (zlib: ") +
                        (stream_.msg != nullptr ? stream_.msg : zError(status)) + ")");
      }
    }
    return wanted - stream_.avail_out;
  }

 private:
  bool refill() {
    const std::size_t n = raw_->read_some(input_.data(), input_.size());
    stream_.next_in = reinterpret_cast<Bytef*>(input_.data());
    stream_.avail_in = static_cast<uInt>(n);
    return n > 0;
  }

  std::unique_ptr<PlainSource> raw_;
  z_stream stream_{};
  std::vector<char> input_;
  bool between_members_ = false;  // a member ended: more members, zero padding or the end of the file may follow
  bool ended_ = false;
};

}  // namespace

DataFileStream::DataFileStream(const fs::path& file, std::string_view what) : buffer_(kBlockBytes) {
  // Recognized by what the file holds, not by its name.
  auto plain = std::make_unique<PlainSource>(file, what);
  if (starts_with_gzip_magic(plain->file())) {
    source_ = std::make_unique<GzipSource>(std::move(plain));
  } else {
    source_ = std::move(plain);
  }
  // A UTF-8 byte order mark (as some Windows tools write) is not part of the data.
  if (peek() == 0xEF) {
    const std::size_t saved = position_;
    if (get() == 0xEF && get() == 0xBB && get() == 0xBF) return;
    position_ = saved;
  }
}

DataFileStream::~DataFileStream() = default;

const fs::path& DataFileStream::file() const { return source_->file().path(); }
bool DataFileStream::compressed() const { return source_->compressed(); }

bool DataFileStream::fill() {
  try {
    size_ = source_->read_some(buffer_.data(), buffer_.size());
  } catch (const GzipError& e) {
    throw std::runtime_error(file().string() + ": " + e.what() + " at line " + std::to_string(line_) +
                             " of its text; the file is damaged: compress it again, or give the uncompressed file");
  }
  position_ = 0;
  return size_ > 0;
}

bool DataFileStream::read_line(std::string& line, std::size_t max, bool& overlong) {
  line.clear();
  overlong = false;
  if (peek() == kEnd) return false;
  for (;;) {
    if (position_ == size_ && !fill()) return true;
    const char* begin = buffer_.data() + position_;
    const void* newline = std::memchr(begin, '\n', size_ - position_);
    const std::size_t length = newline ? static_cast<const char*>(newline) - begin : size_ - position_;
    if (!overlong && line.size() + length <= max) {
      line.append(begin, length);
    } else if (!overlong) {
      overlong = true;
      line.clear();
    }
    position_ += length;
    if (newline) {
      ++position_;
      ++line_;
      return true;
    }
  }
}

void DataFileStream::skip_whitespace() {
  for (int c = peek(); c == ' ' || c == '\t' || c == '\n' || c == '\r'; c = peek()) get();
}

}  // namespace fitsum::util
