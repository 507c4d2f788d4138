// The safetensors format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length, a JSON
// header mapping tensor names to {dtype, shape, data_offsets}, then the raw little-endian data.
//
// The reader trusts nothing: the header length is bounded, every entry's offsets must lie inside the data area, match
// dtype × shape without integer overflow, and the entries must tile the data area without gaps or overlaps (as the
// reference implementation requires). Each violation is a std::runtime_error naming the file and tensor.
// The writer produces what HF's save_file writes: sorted names, the header padded with spaces to 8 bytes, and
// `__metadata__`; it writes atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

namespace fitsum::util {
class MappedFile;
}

namespace fitsum::io {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "F64", "I64", ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets relative to the start of the data area
  std::uint64_t end = 0;
};

class SafetensorsReader {
 public:
  // Maps the file and validates its header; throws std::runtime_error on any defect.
  explicit SafetensorsReader(std::filesystem::path path);
  // The same over bytes in memory, which must outlive the reader; `source` names them in errors.
  SafetensorsReader(const unsigned char* data, std::size_t size, std::filesystem::path source);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;

  // A copy of the tensor converted to `dtype` (on the CPU). F32/F16/BF16/F64 convert to any floating dtype.
  at::Tensor read(const std::string& name, at::ScalarType dtype) const;
  // A copy in the stored dtype.
  at::Tensor read(const std::string& name) const;

 private:
  void parse_header();
  void parse_metadata(const nlohmann::json& value);
  SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& value, std::uint64_t data_size) const;
  void check_tiling(std::uint64_t data_size) const;

  std::filesystem::path path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::unique_ptr<util::MappedFile> file_;
  const unsigned char* mapping_ = nullptr;
  std::size_t mapping_size_ = 0;
  std::size_t data_start_ = 0;
};

// Largest header accepted, as in the reference implementation (100 MB); most dimensions of one tensor.
constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
constexpr std::size_t kMaxSafetensorsDims = 16;

// Writes `tensors` (CPU or not; any supported dtype) to `path` atomically.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// "F32" <-> at::kFloat etc.; throws std::runtime_error for dtypes fitsum cannot hold.
at::ScalarType scalar_type_from_safetensors(const std::string& dtype, const std::string& context);
std::string safetensors_dtype(at::ScalarType type);
std::size_t safetensors_dtype_size(const std::string& dtype);  // 0 when unknown

}  // namespace fitsum::io
