// Implements event_file.h.
#include "event_file.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fitsum::test {

namespace {

std::uint64_t little_endian(const std::string& bytes, std::size_t at, int width) {
  std::uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes.at(at + i));
  return value;
}

struct Wire {
  const std::string& bytes;
  std::size_t at = 0;
  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const auto byte = static_cast<unsigned char>(bytes.at(at++));
      value |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    throw std::runtime_error("varint too long");
  }
  std::string length_delimited() {
    const auto n = varint();
    auto out = bytes.substr(at, n);
    at += n;
    return out;
  }
  void skip(int wire_type) {
    if (wire_type == 0)
      varint();
    else if (wire_type == 1)
      at += 8;
    else if (wire_type == 2)
      length_delimited();
    else if (wire_type == 5)
      at += 4;
    else
      throw std::runtime_error("unknown wire type " + std::to_string(wire_type));
  }
};

std::pair<std::string, float> decode_value(const std::string& bytes) {
  Wire w{bytes};
  std::pair<std::string, float> out;
  while (w.at < bytes.size()) {
    const auto key = w.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == 2) {
      out.first = w.length_delimited();
    } else if (field == 2 && type == 5) {
      std::uint32_t raw = static_cast<std::uint32_t>(little_endian(bytes, w.at, 4));
      std::memcpy(&out.second, &raw, 4);
      w.at += 4;
    } else {
      w.skip(type);
    }
  }
  return out;
}

EventRecord decode_event(const std::string& bytes) {
  Wire w{bytes};
  EventRecord event;
  while (w.at < bytes.size()) {
    const auto key = w.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == 1) {
      const auto raw = little_endian(bytes, w.at, 8);
      std::memcpy(&event.wall_time, &raw, 8);
      w.at += 8;
    } else if (field == 2 && type == 0) {
      event.step = static_cast<std::int64_t>(w.varint());
    } else if (field == 3 && type == 2) {
      event.file_version = w.length_delimited();
    } else if (field == 5 && type == 2) {
      const auto summary = w.length_delimited();
      Wire s{summary};
      while (s.at < summary.size()) {
        const auto k = s.varint();
        if ((k >> 3) == 1 && (k & 7) == 2)
          event.scalars.push_back(decode_value(s.length_delimited()));
        else
          s.skip(static_cast<int>(k & 7));
      }
    } else {
      w.skip(type);
    }
  }
  return event;
}

}  // namespace

std::uint32_t reference_masked_crc32c(const std::string& bytes) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : bytes) {
    crc ^= c;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  crc ^= 0xFFFFFFFFu;
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::vector<EventRecord> read_event_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  std::vector<EventRecord> events;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::string where = file.string() + " record " + std::to_string(events.size());
    if (bytes.size() - at < 12) throw std::runtime_error(where + ": truncated header");
    const auto length = little_endian(bytes, at, 8);
    if (little_endian(bytes, at + 8, 4) != reference_masked_crc32c(bytes.substr(at, 8))) {
      throw std::runtime_error(where + ": length CRC mismatch");
    }
    if (bytes.size() - at - 12 < length + 4) throw std::runtime_error(where + ": truncated data");
    const auto payload = bytes.substr(at + 12, length);
    if (little_endian(bytes, at + 12 + length, 4) != reference_masked_crc32c(payload)) {
      throw std::runtime_error(where + ": data CRC mismatch");
    }
    events.push_back(decode_event(payload));
    at += 12 + length + 4;
  }
  return events;
}

}  // namespace fitsum::test
