// Overflow-checked integer arithmetic for numbers that come from files and flags (tensor shapes, counts, sizes):
// a product that wraps would turn a hostile shape into a small allocation and a later out-of-bounds access, or a
// batch size into a division by zero. The compiler's builtins do the checking; callers say what the number is.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace fitsum::util {

// True when a * b (a + b) does not fit in T; `out` holds the product (sum) otherwise.
template <typename T>
[[nodiscard]] bool multiply_overflows(T a, T b, T& out) {
  static_assert(std::is_integral_v<T>);
  return __builtin_mul_overflow(a, b, &out);
}
template <typename T>
[[nodiscard]] bool add_overflows(T a, T b, T& out) {
  static_assert(std::is_integral_v<T>);
  return __builtin_add_overflow(a, b, &out);
}

// a * b, or std::invalid_argument("<what> overflows ...") when it does not fit in T.
template <typename T>
T checked_multiply(T a, T b, const std::string& what) {
  T out{};
  if (multiply_overflows(a, b, out)) {
    throw std::invalid_argument(what + " overflows: " + std::to_string(a) + " x " + std::to_string(b) +
                                " does not fit in a " + std::to_string(8 * sizeof(T)) + "-bit integer");
  }
  return out;
}
template <typename T>
T checked_add(T a, T b, const std::string& what) {
  T out{};
  if (add_overflows(a, b, out)) {
    throw std::invalid_argument(what + " overflows: " + std::to_string(a) + " + " + std::to_string(b) +
                                " does not fit in a " + std::to_string(8 * sizeof(T)) + "-bit integer");
  }
  return out;
}

// Powers of two, as the CUDA caching allocator's rounding rules use them.
inline bool is_power_of_two(std::uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }
// The position of the highest set bit (floor of log2); -1 for 0.
inline int floor_log2(std::uint64_t v) {
  int log = -1;
  while (v != 0) {
    v >>= 1;
    ++log;
  }
  return log;
}

}  // namespace fitsum::util
