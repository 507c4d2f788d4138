// The zip container that torch.save writes (PyTorch's PyTorchStreamWriter over miniz): every record stored
// uncompressed, names "<archive>/data.pkl", "<archive>/data/<key>", "<archive>/version", a zip64 end record, local
// headers padded so that data starts on 64-byte boundaries, sizes and CRC-32 in the central directory (the local
// headers defer them to data descriptors).
//
// This reader accepts that subset and nothing else: no compression, no encryption, no multi-disk archives. Every
// offset and size is checked against the buffer before it is used, so the records it returns can be read in place
// from a mapping. LibTorch's own PyTorchStreamReader allocates whatever size an archive claims before reading,
// with no way to check a record's method or size first; hence this reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fitsum::io {

struct ZipRecord {
  std::string name;
  std::uint64_t offset = 0;  // of the first data byte, from the start of the archive
  std::uint64_t size = 0;
  std::uint32_t crc32 = 0;  // as the central directory states it
};

// Bounds of what a state dict archive may hold; far above real checkpoints (a few thousand records).
constexpr std::uint64_t kMaxZipRecords = 1'000'000;
constexpr std::size_t kMaxZipNameBytes = 4096;

// The records of the archive held in `data` (`size` bytes), in directory order. Throws std::runtime_error naming
// `source` and the record for anything outside the subset above or any offset outside the buffer.
std::vector<ZipRecord> read_zip_directory(const unsigned char* data, std::size_t size, const std::string& source);

// The zip CRC-32 of `size` bytes.
std::uint32_t zip_crc32(const unsigned char* data, std::size_t size);

}  // namespace fitsum::io
