// Implements include/fitsum/tokenizer/python_text.h. References: CPython's unicode_isspace (Objects/unicodetype_db.h)
// and its UTF-8 decoder with errors="replace"; the Unicode Standard's Table 3-7 of well-formed byte sequences.
#include "fitsum/tokenizer/python_text.h"

namespace fitsum::tokenizer {

namespace {

// The length of the well-formed UTF-8 sequence at text[pos], or 0 with `prefix` set to the bytes that start a
// valid sequence before it breaks (the maximal subpart that one U+FFFD replaces; at least 1).
std::size_t well_formed_length(std::string_view text, std::size_t pos, std::size_t& prefix) {
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

std::size_t first_non_space(std::string_view text) {
  std::size_t length = 0;
  std::size_t pos = 0;
  while (pos < text.size() && is_python_space(code_point_at(text, pos, length))) pos += length;
  return pos;
}

std::size_t end_of_non_space(std::string_view text) {
  std::size_t length = 0;
  std::size_t end = 0;
  for (std::size_t pos = 0; pos < text.size(); pos += length) {
    if (!is_python_space(code_point_at(text, pos, length))) end = pos + length;
  }
  return end;
}

}  // namespace

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t code_point_at(std::string_view text, std::size_t pos, std::size_t& length) {
  std::size_t prefix = 0;
  length = well_formed_length(text, pos, prefix);
  const auto lead = static_cast<unsigned char>(text[pos]);
  if (length <= 1) {
    length = 1;
    return lead;
  }
  char32_t c = lead & (0x7F >> length);
  for (std::size_t i = 1; i < length; ++i) c = (c << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string python_strip(std::string_view text) {
  const std::size_t begin = first_non_space(text);
  const std::size_t end = end_of_non_space(text);
  return begin >= end ? std::string() : std::string(text.substr(begin, end - begin));
}

std::string python_lstrip(std::string_view text) { return std::string(text.substr(first_non_space(text))); }

std::string python_rstrip(std::string_view text) { return std::string(text.substr(0, end_of_non_space(text))); }

std::string decode_utf8_replacing(std::string_view bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(bytes.size());
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    std::size_t prefix = 0;
    const std::size_t length = well_formed_length(bytes, pos, prefix);
    if (length > 0) {
      out.append(bytes, pos, length);
      pos += length;
    } else {
      out += kReplacement;
      pos += prefix;
    }
  }
  return out;
}

std::size_t find_invalid_utf8(std::string_view text) {
  std::size_t prefix = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t length = well_formed_length(text, pos, prefix);
    if (length == 0) return pos;
    pos += length;
  }
  return std::string_view::npos;
}

}  // namespace fitsum::tokenizer
