// Implements include/fitsum/util/python_numbers.h. The grammar is Python's (the int() and float() documentation):
//   digitpart ::= digit (["_"] digit)*
//   int       ::= [sign] digitpart
//   float     ::= [sign] (([digitpart] "." digitpart | digitpart ["."]) [("e" | "E") [sign] digitpart]
//                         | "inf" | "infinity" | "nan")            (inf and nan in any case)
// each with optional whitespace around it. The checked text, without its underscores, goes to strtod, which rounds
// a decimal to the nearest double as Python does.
#include "fitsum/util/python_numbers.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace fitsum::util {

namespace {

std::string_view strip(std::string_view text) {
  constexpr std::string_view space = " \t\n\r\f\v";
  const auto first = text.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(space) - first + 1);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Reads a digitpart at `pos` into `digits` (underscores dropped); false when there is none. An underscore counts
// only between two digits, so "1__0", "_1" and "1_" stop before it.
bool read_digits(std::string_view text, std::size_t& pos, std::string& digits) {
  const std::size_t start = pos;
  while (pos < text.size()) {
    if (is_digit(text[pos])) {
      digits += text[pos++];
    } else if (text[pos] == '_' && pos > start && pos + 1 < text.size() && is_digit(text[pos + 1])) {
      ++pos;
    } else {
      break;
    }
  }
  return pos > start;
}

void read_sign(std::string_view text, std::size_t& pos, std::string& out) {
  if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) out += text[pos++];
}

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != b[i]) return false;
  }
  return true;
}

}  // namespace

std::int64_t parse_python_int(std::string_view text) {
  const auto body = strip(text);
  std::size_t pos = 0;
  std::string sign;
  std::string digits;
  read_sign(body, pos, sign);
  if (!read_digits(body, pos, digits) || pos != body.size()) {
    throw std::invalid_argument(quoted(text) +
                                " is not a decimal integer (read as Python's int() reads it: 010 is 10, and "
                                "0x10 or 1e3 are not integers)");
  }
  const bool negative = sign == "-";
  // Accumulated as a negative number, whose range includes int64's minimum.
  std::int64_t value = 0;
  for (const char digit : digits) {
    if (__builtin_mul_overflow(value, 10, &value) || __builtin_sub_overflow(value, digit - '0', &value)) {
      throw std::invalid_argument(quoted(text) + " is out of range (at most " +
                                  std::to_string(std::numeric_limits<std::int64_t>::max()) + ")");
    }
  }
  if (!negative && value == std::numeric_limits<std::int64_t>::min()) {
    throw std::invalid_argument(quoted(text) + " is out of range (at most " +
                                std::to_string(std::numeric_limits<std::int64_t>::max()) + ")");
  }
  return negative ? value : -value;
}

double parse_python_float(std::string_view text) {
  const auto body = strip(text);
  std::size_t pos = 0;
  std::string clean;
  read_sign(body, pos, clean);
  const auto word = body.substr(pos);
  const bool negative = clean == "-";
  if (equals_ignoring_case(word, "inf") || equals_ignoring_case(word, "infinity")) {
    return negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  if (equals_ignoring_case(word, "nan")) return std::numeric_limits<double>::quiet_NaN();
  bool valid = read_digits(body, pos, clean);
  if (pos < body.size() && body[pos] == '.') {
    clean += body[pos++];
    valid = read_digits(body, pos, clean) || valid;
  }
  if (valid && pos < body.size() && (body[pos] == 'e' || body[pos] == 'E')) {
    clean += body[pos++];
    read_sign(body, pos, clean);
    valid = read_digits(body, pos, clean);
  }
  if (!valid || pos != body.size()) {
    throw std::invalid_argument(quoted(text) +
                                " is not a number (read as Python's float() reads it: decimal digits with an "
                                "optional exponent, inf or nan; no hexadecimal)");
  }
  return std::strtod(clean.c_str(), nullptr);
}

std::string exact_decimal(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

}  // namespace fitsum::util
