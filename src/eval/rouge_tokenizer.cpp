// Implements include/fitsum/eval/rouge_tokenizer.h in one pass over the UTF-8 text: each code point is reduced to
// the [a-z0-9] characters its lowercase form contributes, everything else becomes a token boundary.
#include "fitsum/eval/rouge_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "fitsum/eval/porter_stemmer.h"

namespace fitsum::eval {

namespace {

struct LowercaseToAscii {
  char32_t code_point;
  const char* reduced;  // str.lower() with runs outside [a-z0-9] as one space
};

constexpr LowercaseToAscii kLowercaseToAscii[] = {
#include "rouge_lowercase_table.inc"
};

constexpr bool sorted_by_code_point() {
  for (std::size_t i = 1; i < std::size(kLowercaseToAscii); ++i) {
    if (!(kLowercaseToAscii[i - 1].code_point < kLowercaseToAscii[i].code_point)) {
      return false;
    }
  }
  return true;
}
static_assert(sorted_by_code_point(), "the lowercase table is searched by bisection");

constexpr char32_t kInvalid = 0xFFFFFFFF;

// Decodes the UTF-8 sequence at text[pos], advancing pos; an invalid or truncated sequence consumes one byte and
// yields kInvalid.
char32_t next_code_point(std::string_view text, std::size_t& pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  int length = 0;
  char32_t cp = 0;
  if (lead < 0x80) {
    ++pos;
    return lead;
  } else if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    cp = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    cp = lead & 0x07;
  } else {
    ++pos;
    return kInvalid;
  }
  if (pos + length > text.size()) {
    ++pos;
    return kInvalid;
  }
  for (int i = 1; i < length; ++i) {
    const unsigned char continuation = byte(pos + i);
    if ((continuation & 0xC0) != 0x80) {
      ++pos;
      return kInvalid;
    }
    cp = (cp << 6) | (continuation & 0x3F);
  }
  // Reject overlong forms, surrogates and code points past U+10FFFF.
  const bool overlong = (length == 3 && cp < 0x800) || (length == 4 && cp < 0x10000);
  if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
    ++pos;
    return kInvalid;
  }
  pos += length;
  return cp;
}

const char* lowercase_to_ascii(char32_t cp) {
  const auto* end = std::end(kLowercaseToAscii);
  const auto* it = std::lower_bound(std::begin(kLowercaseToAscii), end, cp,
                                    [](const LowercaseToAscii& entry, char32_t key) { return entry.code_point < key; });
  return (it != end && it->code_point == cp) ? it->reduced : nullptr;
}

}  // namespace

std::vector<std::string> rouge_tokenize(std::string_view text, bool use_stemmer) {
  std::vector<std::string> tokens;
  std::string current;
  const auto end_token = [&] {
    if (current.empty()) {
      return;
    }
    // rouge_score stems only tokens longer than 3 characters ("was", "has" stay as they are).
    tokens.push_back(use_stemmer && current.size() > 3 ? porter_stem(current) : current);
    current.clear();
  };
  const auto append_reduced = [&](char c) {
    if (c == ' ') {
      end_token();
    } else {
      current.push_back(c);
    }
  };

  std::size_t pos = 0;
  while (pos < text.size()) {
    const char32_t cp = next_code_point(text, pos);
    if (cp >= 'A' && cp <= 'Z') {
      current.push_back(static_cast<char>(cp - 'A' + 'a'));
    } else if ((cp >= 'a' && cp <= 'z') || (cp >= '0' && cp <= '9')) {
      current.push_back(static_cast<char>(cp));
    } else if (const char* reduced = cp >= 0x80 && cp != kInvalid ? lowercase_to_ascii(cp) : nullptr) {
      for (const char* c = reduced; *c != '\0'; ++c) {
        append_reduced(*c);
      }
    } else {
      end_token();
    }
  }
  end_token();
  return tokens;
}

}  // namespace fitsum::eval
