// Implements include/fitsum/io/pytorch_bin.h: the archive's records are matched to the names torch.save gives them,
// then every tensor of the pickle is checked against the record of its storage.
#include "fitsum/io/pytorch_bin.h"
#include "fitsum/util/strings.h"

#include <cstring>
#include <stdexcept>

#include <ATen/ATen.h>

#include "fitsum/util/checked_math.h"
#include "fitsum/util/files.h"

namespace fitsum::io {

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& why) {
  throw std::runtime_error("'" + source + "' is not a valid pytorch_model.bin: " + why +
                           "; the file is corrupted or incomplete (download or save it again, or convert it to "
                           "model.safetensors)");
}

using util::ends_with;

}  // namespace

PytorchBinReader::PytorchBinReader(const std::filesystem::path& path)
    : file_(std::make_unique<util::MappedFile>(path, "the weights file")), source_(path.string()) {
  data_ = file_->data();
  size_ = file_->size();
  open();
}

PytorchBinReader::PytorchBinReader(const unsigned char* data, std::size_t size, std::string source)
    : data_(data), size_(size), source_(std::move(source)) {
  open();
}

PytorchBinReader::~PytorchBinReader() = default;

// torch.save names every record "<archive>/<name>": data.pkl, data/<storage key>, version, and in newer versions
// byteorder, .data/version, .data/serialization_id, and (torch 2.x) .format_version and .storage_alignment. Anything
// else is refused.
void PytorchBinReader::check_records(const std::vector<ZipRecord>& records) {
  for (const auto& record : records) {
    if (ends_with(record.name, "/data.pkl") && record.name.find('/') == record.name.size() - 9) {
      if (!prefix_.empty()) fail(source_, "it holds two pickles ('" + prefix_ + "data.pkl' and '" + record.name + "')");
      prefix_ = record.name.substr(0, record.name.size() - 8);
    }
  }
  if (prefix_.empty()) fail(source_, "it has no <archive>/data.pkl record");
  for (const auto& record : records) {
    if (record.name.compare(0, prefix_.size(), prefix_) != 0) {
      fail(source_, "record '" + record.name + "' lies outside the archive folder '" + prefix_ + "'");
    }
    const std::string name = record.name.substr(prefix_.size());
    if (name.rfind("data/", 0) == 0) {
      storages_[name.substr(5)] = record;
    } else if (name == "byteorder") {
      if (record.size != 6 || std::memcmp(data_ + record.offset, "little", 6) != 0) {
        fail(source_, "it was saved on a big-endian machine (byteorder is not 'little')");
      }
    } else if (name != "data.pkl" && name != "version" && name != ".data/version" && name != ".data/serialization_id" &&
               name != ".format_version" && name != ".storage_alignment") {
      fail(source_, "it holds record '" + record.name + "', which torch.save does not write");
    }
  }
}

// The tensor's storage must be a record of exactly storage_numel elements, and every element the view reaches
// (offset + sum of (size - 1) * stride) must lie inside it.
void PytorchBinReader::check_tensor(const PickledTensor& t) const {
  const std::string where = "tensor '" + t.name + "'";
  const auto record = storages_.find(t.storage_key);
  if (record == storages_.end()) fail(source_, where + " refers to storage '" + t.storage_key + "', which is missing");
  const auto element = static_cast<std::uint64_t>(c10::elementSize(t.dtype));
  std::uint64_t bytes = 0;
  if (util::multiply_overflows(static_cast<std::uint64_t>(t.storage_numel), element, bytes) ||
      bytes != record->second.size) {
    fail(source_, where + ": storage '" + t.storage_key + "' holds " + std::to_string(record->second.size) +
                      " bytes, but " + std::to_string(t.storage_numel) + " elements of " + c10::toString(t.dtype) +
                      " need " + std::to_string(t.storage_numel) + " x " + std::to_string(element));
  }
  std::int64_t elements = 1;
  std::int64_t last = t.storage_offset;
  for (std::size_t i = 0; i < t.sizes.size(); ++i) {
    std::int64_t reach = 0;
    if (util::multiply_overflows(t.sizes[i], elements, elements) ||
        (t.sizes[i] > 0 &&
         (util::multiply_overflows(t.sizes[i] - 1, t.strides[i], reach) || util::add_overflows(last, reach, last)))) {
      fail(source_, where + " has sizes and strides whose extent overflows");
    }
  }
  if (elements > 0 ? last >= t.storage_numel : t.storage_offset > t.storage_numel) {
    fail(source_, where + " reaches element " + std::to_string(last) + " of storage '" + t.storage_key +
                      "', which has " + std::to_string(t.storage_numel) + " (storage offset " +
                      std::to_string(t.storage_offset) + ")");
  }
}

void PytorchBinReader::open() {
  const auto records = read_zip_directory(data_, size_, source_);
  check_records(records);
  const ZipRecord* pickle = nullptr;
  for (const auto& record : records) {
    if (record.name == prefix_ + "data.pkl") pickle = &record;
  }
  const unsigned char* pickle_data = data_ + pickle->offset;
  if (zip_crc32(pickle_data, static_cast<std::size_t>(pickle->size)) != pickle->crc32) {
    fail(source_, "data.pkl does not match its CRC-32");
  }
  tensors_ = read_state_dict_pickle(pickle_data, static_cast<std::size_t>(pickle->size), source_);
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    check_tensor(tensors_[i]);
    index_[tensors_[i].name] = i;
  }
}

const PickledTensor& PytorchBinReader::tensor(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw std::runtime_error("'" + source_ + "' has no tensor '" + name + "'");
  return tensors_[it->second];
}

at::Tensor PytorchBinReader::read(const std::string& name) const {
  const PickledTensor& t = tensor(name);
  const ZipRecord& record = storages_.at(t.storage_key);
  const unsigned char* bytes = data_ + record.offset;
  const auto size = static_cast<std::size_t>(record.size);
  if (crc_checked_.count(t.storage_key) == 0) {
    if (zip_crc32(bytes, size) != record.crc32) {
      fail(source_, "the data of tensor '" + name + "' (storage '" + t.storage_key + "') does not match its CRC-32");
    }
    if (t.dtype == at::kBool) {  // any byte but 0 and 1 is not a bool
      for (std::size_t i = 0; i < size; ++i) {
        if (bytes[i] > 1) fail(source_, "tensor '" + name + "' holds a bool that is neither 0 nor 1");
      }
    }
    crc_checked_.insert(t.storage_key);
  }
  // Copied into an aligned tensor first: the record's alignment is the writer's promise, not a checked fact.
  at::Tensor storage = at::empty({t.storage_numel}, at::TensorOptions().dtype(t.dtype));
  if (size > 0) std::memcpy(storage.data_ptr(), bytes, size);
  return storage.as_strided(t.sizes, t.strides, t.storage_offset).clone(at::MemoryFormat::Contiguous);
}

at::Tensor PytorchBinReader::read(const std::string& name, at::ScalarType dtype) const { return read(name).to(dtype); }

}  // namespace fitsum::io
