// Typed reads of config.json fields, as transformers' config classes take them: an absent or null field is the
// default; a value of the wrong JSON type is an error naming the file and the field.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace fitsum::families {

// Throws std::invalid_argument "<source>: config field '<name>' has value <v>: expected ..." for a wrong type.
template <typename T>
T field(const nlohmann::json& j, const char* name, T fallback, const std::string& source) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    return fallback;
  }
  try {
    if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) throw std::invalid_argument("expected true or false");
    } else if constexpr (std::is_arithmetic_v<T>) {
      if (!it->is_number()) throw std::invalid_argument("expected a number");
      if constexpr (std::is_integral_v<T>) {
        if (!it->is_number_integer()) throw std::invalid_argument("expected an integer");
      }
    } else {
      if (!it->is_string()) throw std::invalid_argument("expected a string");
    }
    return it->get<T>();
  } catch (const std::exception& e) {
    throw std::invalid_argument(source + ": config field '" + name + "' has value " + it->dump() + ": " + e.what());
  }
}

// A token id field; eos_token_id may be a list in newer configs, and the first entry is the one generation stops on.
std::int64_t token_field(const nlohmann::json& j, const char* name, std::int64_t fallback, const std::string& source);

}  // namespace fitsum::families
