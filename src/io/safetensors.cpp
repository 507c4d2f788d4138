// Implements include/fitsum/io/safetensors.h over a read-only mapping (tensors are copied out, so the mapping never
// escapes) and an atomic writer.
#include "fitsum/io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fitsum/util/checked_math.h"
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

SafetensorsReader::SafetensorsReader(std::filesystem::path path)
    : path_(std::move(path)), file_(std::make_unique<util::MappedFile>(path_, "the safetensors file")) {
  mapping_ = file_->data();
  mapping_size_ = file_->size();
  parse_header();
}

SafetensorsReader::SafetensorsReader(const unsigned char* data, std::size_t size, std::filesystem::path source)
    : path_(std::move(source)), mapping_(data), mapping_size_(size) {
  parse_header();
}

SafetensorsReader::~SafetensorsReader() = default;

void SafetensorsReader::parse_header() {
  const auto file_size = static_cast<std::uint64_t>(mapping_size_);
  if (file_size < 8) {
    fail(path_, "the file has " + std::to_string(file_size) + " bytes, fewer than the 8-byte header length");
  }
  std::uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | mapping_[i];  // little-endian
  if (header_size > kMaxSafetensorsHeaderBytes) {
    fail(path_, "header length " + std::to_string(header_size) + " exceeds the " +
                    std::to_string(kMaxSafetensorsHeaderBytes) + "-byte limit");
  }
  if (header_size > file_size - 8) {
    fail(path_, "header length " + std::to_string(header_size) + " runs past the end of the " +
                    std::to_string(file_size) + "-byte file");
  }
  data_start_ = static_cast<std::size_t>(8 + header_size);
  const std::uint64_t data_size = file_size - data_start_;

  nlohmann::json header;
  try {
    header = util::parse_json(std::string_view(reinterpret_cast<const char*>(mapping_ + 8), header_size), "header");
  } catch (const util::JsonError& e) {
    fail(path_, "the header is not valid JSON: " + e.reason());
  }
  if (!header.is_object()) fail(path_, "the header is not a JSON object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      parse_metadata(it.value());
    } else {
      entries_.push_back(parse_entry(it.key(), it.value(), data_size));
    }
  }
  check_tiling(data_size);
  for (std::size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

void SafetensorsReader::parse_metadata(const nlohmann::json& value) {
  if (!value.is_object()) fail(path_, "__metadata__ is not an object");
  for (auto m = value.begin(); m != value.end(); ++m) {
    if (!m.value().is_string()) fail(path_, "__metadata__ value '" + m.key() + "' is not a string");
    metadata_[m.key()] = m.value().get<std::string>();
  }
}

// {dtype, shape, data_offsets}: the offsets must lie in the data area and span exactly dtype x shape bytes.
SafetensorsEntry SafetensorsReader::parse_entry(const std::string& name, const nlohmann::json& value,
                                                std::uint64_t data_size) const {
  const std::string where = "tensor '" + name + "'";
  if (!value.is_object()) fail(path_, where + " has no {dtype, shape, data_offsets} object");
  SafetensorsEntry entry;
  entry.name = name;
  const auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) fail(path_, where + " has no dtype string");
  entry.dtype = dtype->get<std::string>();
  const std::size_t item_size = safetensors_dtype_size(entry.dtype);
  if (item_size == 0) fail(path_, where + " has unsupported dtype '" + entry.dtype + "'");
  const auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) fail(path_, where + " has no shape list");
  if (shape->size() > kMaxSafetensorsDims) fail(path_, where + " has more than 16 dimensions");
  std::uint64_t elements = 1;
  std::int64_t extent = 1;  // the product of the non-zero sizes: LibTorch's strides must fit in int64
  for (const auto& dim : *shape) {
    if (!dim.is_number_unsigned()) fail(path_, where + " has a shape entry that is not a non-negative integer");
    const auto d = dim.get<std::uint64_t>();
    if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        util::multiply_overflows(elements, d, elements) ||
        util::multiply_overflows(extent, std::max<std::int64_t>(static_cast<std::int64_t>(d), 1), extent)) {
      fail(path_, where + " has a shape whose size overflows");
    }
    entry.shape.push_back(static_cast<std::int64_t>(d));
  }
  std::uint64_t expected_bytes = 0;
  if (util::multiply_overflows(elements, std::uint64_t{item_size}, expected_bytes)) {
    fail(path_, where + " byte size overflows");
  }
  const auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned()) {
    fail(path_, where + " has no [begin, end] data_offsets");
  }
  entry.begin = (*offsets)[0].get<std::uint64_t>();
  entry.end = (*offsets)[1].get<std::uint64_t>();
  if (entry.end < entry.begin) fail(path_, where + " has data_offsets that end before they begin");
  if (entry.end > data_size) {
    fail(path_, where + " has data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                    "] past the end of the data area (" + std::to_string(data_size) + " bytes)");
  }
  if (entry.end - entry.begin != expected_bytes) {
    fail(path_, where + " holds " + std::to_string(entry.end - entry.begin) + " bytes but " + entry.dtype +
                    " with shape " + shape->dump() + " needs " + std::to_string(expected_bytes));
  }
  return entry;
}

// The entries must tile the data area exactly: no gaps, no overlaps, nothing left over.
void SafetensorsReader::check_tiling(std::uint64_t data_size) const {
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  std::uint64_t cursor = 0;
  for (const auto* e : by_offset) {
    if (e->begin != cursor) {
      fail(path_, "tensor '" + e->name + "' starts at byte " + std::to_string(e->begin) +
                      " but the previous one ends at " + std::to_string(cursor) + " (overlapping or missing data)");
    }
    cursor = e->end;
  }
  if (cursor != data_size) {
    fail(path_, "the tensors cover " + std::to_string(cursor) + " bytes of a " + std::to_string(data_size) +
                    "-byte data area");
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
  const unsigned char* bytes = mapping_ + data_start_ + e.begin;
  if (type == at::kBool) {  // any byte but 0 and 1 is not a bool
    for (std::uint64_t i = 0; i < e.end - e.begin; ++i) {
      if (bytes[i] > 1) fail(path_, "tensor '" + name + "' holds a BOOL byte that is neither 0 nor 1");
    }
  }
  auto out = torch::empty(e.shape, torch::TensorOptions().dtype(type));
  if (e.end > e.begin) {
    std::memcpy(out.data_ptr(), bytes, e.end - e.begin);
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
