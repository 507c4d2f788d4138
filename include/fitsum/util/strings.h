// Small string helpers the standard library gains only in C++20.
#pragma once

#include <string_view>

namespace fitsum::util {

// Whether `text` ends with `suffix` (std::string_view::ends_with from C++20).
inline bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace fitsum::util
