// A reader of TensorBoard event files written independently of fitsum's writer, for the tests: TFRecord framing
// with both masked CRC32C checks, and a minimal protobuf wire-format decoder of tensorflow.Event (wall_time 1,
// step 2, file_version 3, summary 5) and Summary.Value (tag 1, simple_value 2).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fitsum::test {

struct EventRecord {
  double wall_time = 0.0;
  std::int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;  // tag, simple_value
};

// CRC-32C computed bit by bit (no table), masked as TFRecord masks it.
std::uint32_t reference_masked_crc32c(const std::string& bytes);

// Every record of the file; throws std::runtime_error naming the record whose framing or CRC is wrong.
std::vector<EventRecord> read_event_file(const std::filesystem::path& file);

}  // namespace fitsum::test
