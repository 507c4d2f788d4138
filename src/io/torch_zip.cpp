// Implements include/fitsum/io/torch_zip.h: the end-of-directory records (classic and zip64), then each central
// directory entry and the local header it points to, every read bounds-checked first.
#include "fitsum/io/torch_zip.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>

#include "fitsum/util/checked_math.h"

// LibTorch ships a CRC-32 implementation (the one its zip writer uses) as a header with out-of-line definitions:
// kept in a namespace of its own so that its global names stay private to this file.
namespace fitsum::io::crc_detail {
#include <caffe2/serialize/crc_alt.h>
}  // namespace fitsum::io::crc_detail

namespace fitsum::io {

namespace {

constexpr std::uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr std::uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr std::uint32_t kEndSignature = 0x06054b50;
constexpr std::uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr std::uint32_t kZip64EndSignature = 0x06064b50;
constexpr std::uint64_t kLocalHeaderBytes = 30;
constexpr std::uint64_t kCentralHeaderBytes = 46;
constexpr std::uint64_t kEndBytes = 22;
constexpr std::uint64_t kZip64LocatorBytes = 20;
constexpr std::uint64_t kZip64EndBytes = 56;
constexpr std::uint32_t kSentinel32 = 0xFFFFFFFFu;
// General-purpose flags torch.save's writer sets: bit 3 (sizes in a data descriptor), bit 11 (UTF-8 names).
constexpr std::uint16_t kAllowedFlags = (1u << 3) | (1u << 11);

// Little-endian reads that check their range against the buffer first.
class Bytes {
 public:
  Bytes(const unsigned char* data, std::uint64_t size, const std::string& source)
      : data_(data), size_(size), source_(source) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("'" + source_ + "' is not a torch.save archive: " + why +
                             "; the file is corrupted or truncated, or was not written by torch.save (save the "
                             "weights again, or as model.safetensors)");
  }
  void require(std::uint64_t at, std::uint64_t length, const char* what) const {
    std::uint64_t end = 0;
    if (util::add_overflows(at, length, end) || end > size_) {
      fail(std::string(what) + " at byte " + std::to_string(at) + " (" + std::to_string(length) +
           " bytes) runs past the end of the " + std::to_string(size_) + "-byte file");
    }
  }
  std::uint64_t read(std::uint64_t at, int bytes, const char* what) const {
    require(at, static_cast<std::uint64_t>(bytes), what);
    std::uint64_t value = 0;
    for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | data_[at + static_cast<std::uint64_t>(i)];
    return value;
  }
  std::uint16_t u16(std::uint64_t at, const char* what) const { return static_cast<std::uint16_t>(read(at, 2, what)); }
  std::uint32_t u32(std::uint64_t at, const char* what) const { return static_cast<std::uint32_t>(read(at, 4, what)); }
  std::uint64_t u64(std::uint64_t at, const char* what) const { return read(at, 8, what); }
  std::string text(std::uint64_t at, std::uint64_t length, const char* what) const {
    require(at, length, what);
    return std::string(reinterpret_cast<const char*>(data_ + at), static_cast<std::size_t>(length));
  }
  std::uint64_t size() const { return size_; }

 private:
  const unsigned char* data_;
  std::uint64_t size_;
  const std::string& source_;
};

struct Directory {
  std::uint64_t entries = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

// The end-of-central-directory record ends the file (torch.save writes no archive comment); a zip64 locator and
// record, which torch.save always writes, come right before it and take precedence.
Directory find_directory(const Bytes& bytes) {
  if (bytes.size() < kEndBytes) bytes.fail("it has " + std::to_string(bytes.size()) + " bytes, too few for a zip file");
  const std::uint64_t end = bytes.size() - kEndBytes;
  if (bytes.u32(end, "the end record") != kEndSignature) {
    bytes.fail("it does not end in a zip end-of-directory record (an archive comment, or not a zip file)");
  }
  if (bytes.u16(end + 4, "the end record") != 0 || bytes.u16(end + 6, "the end record") != 0) {
    bytes.fail("it is a multi-disk archive");
  }
  Directory dir;
  dir.entries = bytes.u16(end + 10, "the end record");
  dir.size = bytes.u32(end + 12, "the end record");
  dir.offset = bytes.u32(end + 16, "the end record");
  if (end >= kZip64LocatorBytes && bytes.u32(end - kZip64LocatorBytes, "the zip64 locator") == kZip64LocatorSignature) {
    const std::uint64_t record = bytes.u64(end - kZip64LocatorBytes + 8, "the zip64 locator");
    if (bytes.u32(record, "the zip64 end record") != kZip64EndSignature) {
      bytes.fail("the zip64 locator points at byte " + std::to_string(record) + ", which is no zip64 end record");
    }
    bytes.require(record, kZip64EndBytes, "the zip64 end record");
    if (bytes.u32(record + 16, "the zip64 end record") != 0 || bytes.u32(record + 20, "the zip64 end record") != 0) {
      bytes.fail("it is a multi-disk archive");
    }
    dir.entries = bytes.u64(record + 32, "the zip64 end record");
    dir.size = bytes.u64(record + 40, "the zip64 end record");
    dir.offset = bytes.u64(record + 48, "the zip64 end record");
  } else if (dir.entries == 0xFFFF || dir.size == kSentinel32 || dir.offset == kSentinel32) {
    bytes.fail("the end record defers to a zip64 record that is missing");
  }
  if (dir.entries > kMaxZipRecords) {
    bytes.fail("it claims " + std::to_string(dir.entries) + " records, more than " + std::to_string(kMaxZipRecords));
  }
  bytes.require(dir.offset, dir.size, "the central directory");
  std::uint64_t minimum = 0;
  if (util::multiply_overflows(dir.entries, kCentralHeaderBytes, minimum) || minimum > dir.size) {
    bytes.fail("its central directory (" + std::to_string(dir.size) + " bytes) is too small for " +
               std::to_string(dir.entries) + " records");
  }
  return dir;
}

// Sizes and offset of one central entry; 0xFFFFFFFF fields are in its zip64 extra field, in this order.
void read_zip64_fields(const Bytes& bytes, std::uint64_t extra, std::uint64_t extra_size, std::uint64_t& size,
                       std::uint64_t& compressed, std::uint64_t& local) {
  std::uint64_t at = extra;
  const std::uint64_t end = extra + extra_size;
  while (at + 4 <= end) {
    const std::uint16_t id = bytes.u16(at, "an extra field");
    const std::uint16_t length = bytes.u16(at + 2, "an extra field");
    if (at + 4 + length > end) bytes.fail("an extra field runs past its entry");
    if (id == 0x0001) {
      std::uint64_t field = at + 4;
      for (std::uint64_t* value : {&size, &compressed, &local}) {
        if (*value != kSentinel32) continue;
        if (field + 8 > at + 4 + length) bytes.fail("a zip64 extra field is too short");
        *value = bytes.u64(field, "a zip64 extra field");
        field += 8;
      }
      return;
    }
    at += 4 + length;
  }
  if (size == kSentinel32 || compressed == kSentinel32 || local == kSentinel32) {
    bytes.fail("an entry defers its sizes to a zip64 extra field that is missing");
  }
}

// One central directory entry at `at`; returns the record and moves `at` past the entry.
ZipRecord read_entry(const Bytes& bytes, std::uint64_t& at, std::uint64_t directory_offset) {
  if (bytes.u32(at, "a central directory entry") != kCentralHeaderSignature) {
    bytes.fail("no central directory entry at byte " + std::to_string(at));
  }
  bytes.require(at, kCentralHeaderBytes, "a central directory entry");
  const std::uint16_t flags = bytes.u16(at + 8, "an entry");
  const std::uint16_t method = bytes.u16(at + 10, "an entry");
  ZipRecord record;
  record.crc32 = bytes.u32(at + 16, "an entry");
  std::uint64_t compressed = bytes.u32(at + 20, "an entry");
  record.size = bytes.u32(at + 24, "an entry");
  const std::uint64_t name_bytes = bytes.u16(at + 28, "an entry");
  const std::uint64_t extra_bytes = bytes.u16(at + 30, "an entry");
  const std::uint64_t comment_bytes = bytes.u16(at + 32, "an entry");
  std::uint64_t local = bytes.u32(at + 42, "an entry");
  if (name_bytes == 0 || name_bytes > kMaxZipNameBytes) bytes.fail("an entry has an empty or over-long name");
  record.name = bytes.text(at + kCentralHeaderBytes, name_bytes, "an entry name");
  const std::string where = "record '" + record.name + "'";
  if ((flags & ~kAllowedFlags) != 0) bytes.fail(where + " is encrypted or uses zip features torch.save never writes");
  if (method != 0) bytes.fail(where + " is compressed (method " + std::to_string(method) + "); torch.save stores");
  if (bytes.u16(at + 34, "an entry") != 0) bytes.fail(where + " lies on another disk");
  read_zip64_fields(bytes, at + kCentralHeaderBytes + name_bytes, extra_bytes, record.size, compressed, local);
  if (compressed != record.size) bytes.fail(where + " has different stored and original sizes");
  at += kCentralHeaderBytes + name_bytes + extra_bytes + comment_bytes;

  // The local header repeats the name; the data follows it and its padding, before the central directory.
  if (bytes.u32(local, "a local header") != kLocalHeaderSignature) {
    bytes.fail(where + " points at byte " + std::to_string(local) + ", where no local header starts");
  }
  bytes.require(local, kLocalHeaderBytes, "a local header");
  const std::uint64_t local_name = bytes.u16(local + 26, "a local header");
  const std::uint64_t local_extra = bytes.u16(local + 28, "a local header");
  if (bytes.u16(local + 8, "a local header") != 0) bytes.fail(where + " is compressed in its local header");
  if (bytes.text(local + kLocalHeaderBytes, local_name, "a local name") != record.name) {
    bytes.fail(where + " has another name in its local header");
  }
  record.offset = local + kLocalHeaderBytes + local_name + local_extra;
  bytes.require(record.offset, record.size, where.c_str());
  if (record.offset + record.size > directory_offset) bytes.fail(where + " overlaps the central directory");
  return record;
}

}  // namespace

std::vector<ZipRecord> read_zip_directory(const unsigned char* data, std::size_t size, const std::string& source) {
  const Bytes bytes(data, size, source);
  const Directory dir = find_directory(bytes);
  std::vector<ZipRecord> records;
  records.reserve(static_cast<std::size_t>(dir.entries));
  std::set<std::string> names;
  std::uint64_t at = dir.offset;
  for (std::uint64_t i = 0; i < dir.entries; ++i) {
    if (at >= dir.offset + dir.size) bytes.fail("its central directory ends before its last record");
    records.push_back(read_entry(bytes, at, dir.offset));
    if (!names.insert(records.back().name).second) bytes.fail("record '" + records.back().name + "' is stored twice");
  }
  if (at != dir.offset + dir.size) bytes.fail("its central directory has bytes after its last record");
  return records;
}

std::uint32_t zip_crc32(const unsigned char* data, std::size_t size) {
  // The sliced loop reads 32-bit words; start it at an aligned address.
  std::size_t head = static_cast<std::size_t>(-reinterpret_cast<std::uintptr_t>(data) & 3u);
  if (head > size) head = size;
  std::uint32_t crc = crc_detail::crc32_1byte(data, head, 0);
  return crc_detail::crc32_16bytes(data + head, size - head, crc);
}

}  // namespace fitsum::io
