// Well-formed UTF-8 (the Unicode Standard's Table 3-7): what the data readers require of every data file (as Hugging
// Face `datasets` decodes them) and what the tokenizers' Python-text helpers decode.
#pragma once

#include <cstddef>
#include <string_view>

namespace fitsum::util {

// The length of the well-formed UTF-8 sequence at text[pos], or 0 with `prefix` set to the bytes that start a valid
// sequence before it breaks (the maximal subpart that one U+FFFD replaces; at least 1).
std::size_t well_formed_utf8_length(std::string_view text, std::size_t pos, std::size_t& prefix);

// The byte offset of the first invalid UTF-8 sequence, or npos when `text` is valid UTF-8.
std::size_t find_invalid_utf8(std::string_view text);

}  // namespace fitsum::util
