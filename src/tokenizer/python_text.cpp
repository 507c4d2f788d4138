// Implements include/fitsum/tokenizer/python_text.h. References: CPython's unicode_isspace (Objects/unicodetype_db.h)
// and its UTF-8 decoder with errors="replace" (well-formed sequences as util/utf8.h reads them).
#include "fitsum/tokenizer/python_text.h"

#include "fitsum/util/utf8.h"

namespace fitsum::tokenizer {

namespace {

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
  length = util::well_formed_utf8_length(text, pos, prefix);
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
    const std::size_t length = util::well_formed_utf8_length(bytes, pos, prefix);
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

}  // namespace fitsum::tokenizer
