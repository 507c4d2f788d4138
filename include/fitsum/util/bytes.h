// Byte counts for people: "1.50 GiB" out, "6GiB" / "800MiB" / "1e9" in.
#pragma once

#include <cstdint>
#include <string>

namespace fitsum::util {

// Formats with binary units and two decimals ("512 B", "1.50 KiB", "2.12 GiB").
std::string format_bytes(std::uint64_t bytes);

// Parses "6GiB", "800MiB", "512MB", "1.5G", "1000000"; throws std::invalid_argument with a hint otherwise.
std::uint64_t parse_bytes(const std::string& text);

}  // namespace fitsum::util
