// Python's view of UTF-8 text, where the Hugging Face tokenizers rely on it: str.isspace() (which, unlike Unicode's
// White_Space property, includes U+001C..U+001F), str.strip() / lstrip() / rstrip(), and bytes.decode("utf-8",
// errors="replace"). Text is UTF-8 bytes; a byte that starts no valid sequence counts as one non-space character.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "fitsum/util/utf8.h"

namespace fitsum::tokenizer {

// Python's str.isspace() for one code point.
bool is_python_space(char32_t c);

// Decodes the code point starting at `text[pos]` and sets `length` to its byte count (1 for an invalid byte).
char32_t code_point_at(std::string_view text, std::size_t pos, std::size_t& length);

// Appends the UTF-8 bytes of `c`.
void append_utf8(std::string& out, char32_t c);

std::string python_strip(std::string_view text);
std::string python_lstrip(std::string_view text);
std::string python_rstrip(std::string_view text);

// bytes.decode("utf-8", errors="replace"): each maximal ill-formed subsequence becomes one U+FFFD (Unicode's
// "maximal subpart" practice, which Python follows).
std::string decode_utf8_replacing(std::string_view bytes);

// The byte offset of the first invalid UTF-8 sequence, or npos when `text` is valid UTF-8.
using util::find_invalid_utf8;

}  // namespace fitsum::tokenizer
