// pytorch_model.bin files as torch.save writes them for a state dict: the zip container (torch_zip.h) and its
// data.pkl (torch_pickle.h), with every tensor's storage, offset, sizes and strides checked against the storage's
// record before any data is read, so that no tensor can reach outside its record. Tensors are read one at a time
// from a read-only mapping (a 2 GB checkpoint is never held twice in memory), and each record's CRC-32 is checked
// the first time it is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "fitsum/io/torch_pickle.h"
#include "fitsum/io/torch_zip.h"

namespace fitsum::util {
class MappedFile;
}

namespace fitsum::io {

class PytorchBinReader {
 public:
  // Maps the file and validates the archive, the pickle and every tensor; throws std::runtime_error on any defect.
  explicit PytorchBinReader(const std::filesystem::path& path);
  // The same over bytes in memory, which must outlive the reader; `source` names them in errors.
  PytorchBinReader(const unsigned char* data, std::size_t size, std::string source);
  ~PytorchBinReader();
  PytorchBinReader(const PytorchBinReader&) = delete;
  PytorchBinReader& operator=(const PytorchBinReader&) = delete;

  const std::string& source() const { return source_; }
  // In the state dict's order.
  const std::vector<PickledTensor>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const PickledTensor& tensor(const std::string& name) const;

  // A contiguous copy of the tensor in its stored dtype / converted to `dtype` (on the CPU).
  at::Tensor read(const std::string& name) const;
  at::Tensor read(const std::string& name, at::ScalarType dtype) const;

 private:
  void open();
  void check_records(const std::vector<ZipRecord>& records);
  void check_tensor(const PickledTensor& tensor) const;

  std::unique_ptr<util::MappedFile> file_;
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
  std::string source_;
  std::string prefix_;  // "<archive>/"
  std::vector<PickledTensor> tensors_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, ZipRecord> storages_;  // storage key -> its record
  mutable std::set<std::string> crc_checked_;
};

}  // namespace fitsum::io
