// Crafted torch.save archives for the tests of the .bin reader: a stored zip laid out as torch.save lays it out
// (local headers with deferred sizes, central directory, zip64 end records), and the pickle opcodes of a state dict,
// so that each test can change one thing a hostile or damaged file could change.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fitsum::test {

struct ArchiveRecord {
  std::string name;  // full name, "archive/data.pkl"
  std::string data;
  std::uint16_t method = 0;  // 0 stored; anything else claims compression
};

// The archive's bytes.
std::string stored_zip(const std::vector<ArchiveRecord>& records);

// Pickle pieces (protocol 2) as torch.save writes them.
std::string pickle_string(const std::string& text);                // BINUNICODE
std::string pickle_int(std::int64_t value);                        // BININT1/BININT2/BININT/LONG1
std::string pickle_ints(const std::vector<std::int64_t>& values);  // a tuple of ints
// _rebuild_tensor_v2(('storage', torch.<storage_class>, key, 'cpu', numel), offset, sizes, strides, False,
// OrderedDict())
std::string pickle_tensor(const std::string& storage_class, const std::string& key, std::int64_t numel,
                          std::int64_t offset, const std::vector<std::int64_t>& sizes,
                          const std::vector<std::int64_t>& strides);
// PROTO 2, {name: tensor, ...}, STOP
std::string pickle_state_dict(const std::vector<std::pair<std::string, std::string>>& entries);

// An archive "archive/" holding `pickle` as data.pkl, the storages as data/<key>, and a version record.
std::string torch_archive(const std::string& pickle, const std::vector<std::pair<std::string, std::string>>& storages);

// The bytes of float values.
std::string float_bytes(const std::vector<float>& values);

}  // namespace fitsum::test
