// Implements include/fitsum/io/safetensors.h with a read-only mmap (tensors are copied out, so the mapping never
// escapes) and an atomic writer.
#include "fitsum/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fitsum/util/files.h"

namespace fitsum::io {

namespace {

struct DtypeInfo {
  const char* name;
  at::ScalarType type;
  std::size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {"F64", at::kDouble, 8}, {"F32", at::kFloat, 4}, {"F16", at::kHalf, 2},  {"BF16", at::kBFloat16, 2},
    {"I64", at::kLong, 8},   {"I32", at::kInt, 4},   {"I16", at::kShort, 2}, {"I8", at::kChar, 1},
    {"U8", at::kByte, 1},    {"BOOL", at::kBool, 1},
};

const DtypeInfo* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error("'" + path.string() + "' is not a valid safetensors file: " + what +
                           " (the file is corrupted or incomplete; download or save it again)");
}

bool multiply_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return true;
  out = a * b;
  return false;
}

}  // namespace

at::ScalarType scalar_type_from_safetensors(const std::string& dtype, const std::string& context) {
  const auto* info = find_dtype(dtype);
  if (info == nullptr) {
    throw std::runtime_error(context + ": dtype '" + dtype +
                             "' is not supported (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  }
  return info->type;
}

std::string safetensors_dtype(at::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  throw std::runtime_error(std::string("cannot store tensors of dtype ") + c10::toString(type) + " in safetensors");
}

std::size_t safetensors_dtype_size(const std::string& dtype) {
  const auto* info = find_dtype(dtype);
  return info ? info->size : 0;
}

namespace {

// One header entry: its dtype, shape and data_offsets, checked against each other and the data area.
SafetensorsEntry parse_entry(const std::filesystem::path& path, const std::string& name, const nlohmann::json& value,
                             std::uint64_t data_size) {
  const std::string where = "tensor '" + name + "'";
  if (!value.is_object()) fail(path, where + " has no {dtype, shape, data_offsets} object");
  SafetensorsEntry entry;
  entry.name = name;
  const auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) fail(path, where + " has no dtype string");
  entry.dtype = dtype->get<std::string>();
  const std::size_t item_size = safetensors_dtype_size(entry.dtype);
  if (item_size == 0) fail(path, where + " has unsupported dtype '" + entry.dtype + "'");
  const auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) fail(path, where + " has no shape list");
  std::uint64_t elements = 1;
  for (const auto& dim : *shape) {
    if (!dim.is_number_unsigned()) fail(path, where + " has a shape entry that is not a non-negative integer");
    const auto d = dim.get<std::uint64_t>();
    if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        multiply_overflows(elements, d, elements)) {
      fail(path, where + " has a shape whose size overflows");
    }
    entry.shape.push_back(static_cast<std::int64_t>(d));
  }
  std::uint64_t expected_bytes = 0;
  if (multiply_overflows(elements, item_size, expected_bytes)) fail(path, where + " byte size overflows");
  const auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned()) {
    fail(path, where + " has no [begin, end] data_offsets");
  }
  entry.begin = (*offsets)[0].get<std::uint64_t>();
  entry.end = (*offsets)[1].get<std::uint64_t>();
  if (entry.end < entry.begin) fail(path, where + " has data_offsets that end before they begin");
  if (entry.end > data_size) {
    fail(path, where + " has data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                   "] past the end of the data area (" + std::to_string(data_size) + " bytes)");
  }
  if (entry.end - entry.begin != expected_bytes) {
    fail(path, where + " holds " + std::to_string(entry.end - entry.begin) + " bytes but " + entry.dtype +
                   " with shape " + shape->dump() + " needs " + std::to_string(expected_bytes));
  }
  return entry;
}

// The entries must tile the data area exactly: no gaps, no overlaps, nothing left over.
void check_tiling(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& entries,
                  std::uint64_t data_size) {
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  std::uint64_t cursor = 0;
  for (const auto* e : by_offset) {
    if (e->begin != cursor) {
      fail(path, "tensor '" + e->name + "' starts at byte " + std::to_string(e->begin) +
                     " but the previous one ends at " + std::to_string(cursor) + " (overlapping or missing data)");
    }
    cursor = e->end;
  }
  if (cursor != data_size) {
    fail(path, "the tensors cover " + std::to_string(cursor) + " bytes of a " + std::to_string(data_size) +
                   "-byte data area");
  }
}

struct ParsedHeader {
  std::uint64_t data_start = 0;
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
};

// The 8-byte length, the JSON header and every entry of a mapped file of `file_size` bytes.
ParsedHeader parse_header(const std::filesystem::path& path, const unsigned char* bytes, std::uint64_t file_size) {
  std::uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[i];  // little-endian
  if (header_size > kMaxSafetensorsHeaderBytes) {
    fail(path, "header length " + std::to_string(header_size) + " exceeds the " +
                   std::to_string(kMaxSafetensorsHeaderBytes) + "-byte limit");
  }
  if (header_size > file_size - 8) {
    fail(path, "header length " + std::to_string(header_size) + " runs past the end of the " +
                   std::to_string(file_size) + "-byte file");
  }
  ParsedHeader parsed;
  parsed.data_start = 8 + header_size;
  const std::uint64_t data_size = file_size - parsed.data_start;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + parsed.data_start);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "the header is not a JSON object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() != "__metadata__") {
      parsed.entries.push_back(parse_entry(path, it.key(), it.value(), data_size));
      continue;
    }
    if (!it.value().is_object()) fail(path, "__metadata__ is not an object");
    for (auto m = it.value().begin(); m != it.value().end(); ++m) {
      if (!m.value().is_string()) fail(path, "__metadata__ value '" + m.key() + "' is not a string");
      parsed.metadata[m.key()] = m.value().get<std::string>();
    }
  }
  check_tiling(path, parsed.entries, data_size);
  return parsed;
}

}  // namespace

SafetensorsReader::SafetensorsReader(std::filesystem::path path) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw std::runtime_error("cannot open '" + path_.string() + "': " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot stat '" + path_.string() + "': " + std::strerror(errno));
  }
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    fail(path_, "the file has " + std::to_string(file_size) + " bytes, fewer than the 8-byte header length");
  }
  void* mapped = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED) {
    throw std::runtime_error("cannot map '" + path_.string() + "': " + std::strerror(errno));
  }
  mapping_ = static_cast<const unsigned char*>(mapped);
  mapping_size_ = file_size;
  try {
    auto parsed = parse_header(path_, mapping_, file_size);
    data_start_ = parsed.data_start;
    entries_ = std::move(parsed.entries);
    metadata_ = std::move(parsed.metadata);
    for (std::size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
  } catch (...) {
    ::munmap(const_cast<unsigned char*>(mapping_), mapping_size_);
    mapping_ = nullptr;
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (mapping_ != nullptr) {
    ::munmap(const_cast<unsigned char*>(mapping_), mapping_size_);
  }
}

bool SafetensorsReader::contains(const std::string& name) const { return index_.count(name) != 0; }

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    throw std::runtime_error("'" + path_.string() + "' has no tensor '" + name + "'");
  }
  return entries_[it->second];
}

at::Tensor SafetensorsReader::read(const std::string& name) const {
  const auto& e = entry(name);
  const auto type = scalar_type_from_safetensors(e.dtype, "'" + path_.string() + "' tensor '" + name + "'");
  // Copy into an aligned tensor first: offsets inside the file carry no alignment guarantee.
  auto out = torch::empty(e.shape, torch::TensorOptions().dtype(type));
  if (e.end > e.begin) {
    std::memcpy(out.data_ptr(), mapping_ + data_start_ + e.begin, e.end - e.begin);
  }
  return out;
}

at::Tensor SafetensorsReader::read(const std::string& name, at::ScalarType dtype) const {
  auto raw = read(name);
  return raw.scalar_type() == dtype ? raw : raw.to(dtype);
}

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, at::Tensor>> sorted;
  sorted.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    sorted.emplace_back(name, tensor.detach().to(torch::kCPU).contiguous());
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].first == sorted[i - 1].first) {
      throw std::invalid_argument("tensor '" + sorted[i].first + "' is given twice");
    }
  }

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = metadata;
  }
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : sorted) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(tensor.numel()) * tensor.element_size();
    header[name] = {{"dtype", safetensors_dtype(tensor.scalar_type())},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  unsigned char length[8];
  std::uint64_t n = header_text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);

  util::AtomicFileWriter writer(path);
  writer.write(length, sizeof(length));
  writer.write(header_text.data(), header_text.size());
  for (const auto& [name, tensor] : sorted) {
    writer.write(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()) * tensor.element_size());
  }
  writer.commit();
}

}  // namespace fitsum::io
