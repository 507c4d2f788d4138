// Implements include/fitsum/util/bytes.h.
#include "fitsum/util/bytes.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace fitsum::util {

std::string format_bytes(std::uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[64];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(text, sizeof(text), "%.2f %s", value, units[unit]);
  }
  return text;
}

std::uint64_t parse_bytes(const std::string& text) {
  const auto fail = [&]() -> std::uint64_t {
    throw std::invalid_argument("cannot read '" + text +
                                "' as a size: write a number with an optional unit, e.g. 6GiB, 800MiB, 512MB");
  };
  // Decimal numbers only, as Python reads them; strtod would also read hexadecimal ("0x10GiB").
  const auto first = text.find_first_not_of(" \t+-");
  if (first != std::string::npos && text.compare(first, 2, "0x") == 0) return fail();
  if (first != std::string::npos && text.compare(first, 2, "0X") == 0) return fail();
  std::size_t pos = 0;
  double number = 0.0;
  try {
    number = std::stod(text, &pos);
  } catch (const std::exception&) {
    return fail();
  }
  std::string unit;
  for (std::size_t i = pos; i < text.size(); ++i) {
    if (!std::isspace(static_cast<unsigned char>(text[i]))) {
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
    }
  }
  double scale = 1.0;
  if (unit.empty() || unit == "b") {
    scale = 1.0;
  } else if (unit == "k" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "kb") {
    scale = 1e3;
  } else if (unit == "m" || unit == "mib") {
    scale = 1024.0 * 1024.0;
  } else if (unit == "mb") {
    scale = 1e6;
  } else if (unit == "g" || unit == "gib") {
    scale = 1024.0 * 1024.0 * 1024.0;
  } else if (unit == "gb") {
    scale = 1e9;
  } else if (unit == "t" || unit == "tib") {
    scale = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  } else if (unit == "tb") {
    scale = 1e12;
  } else {
    return fail();
  }
  const double bytes = std::round(number * scale);
  // 2^64 and up do not fit (llround would overflow past 2^63).
  if (!std::isfinite(bytes) || bytes < 0.0 || bytes >= 18446744073709551616.0) {
    return fail();
  }
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace fitsum::util
