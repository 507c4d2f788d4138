// Implements include/fitsum/util/utf8.h after the Unicode Standard's Table 3-7 of well-formed byte sequences.
#include "fitsum/util/utf8.h"

namespace fitsum::util {

std::size_t well_formed_utf8_length(std::string_view text, std::size_t pos, std::size_t& prefix) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  prefix = 1;
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;  // a continuation byte, an overlong lead (C0, C1) or F5..FF
  }
  for (std::size_t i = 1; i < length; ++i) {
    if (pos + i >= text.size()) return 0;
    const unsigned char b = byte(pos + i);
    const unsigned char lo = i == 1 ? low : 0x80;
    const unsigned char hi = i == 1 ? high : 0xBF;
    if (b < lo || b > hi) return 0;
    prefix = i + 1;
  }
  return length;
}

std::size_t find_invalid_utf8(std::string_view text) {
  std::size_t prefix = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t length = well_formed_utf8_length(text, pos, prefix);
    if (length == 0) return pos;
    pos += length;
  }
  return std::string_view::npos;
}

}  // namespace fitsum::util
