// Shared by the libFuzzer targets: the input as text, a temporary file holding it (for readers that take paths),
// and the rule every target enforces: a defect in the input may only surface as the library's documented
// exceptions (std::runtime_error for bad files, std::invalid_argument for bad values). Anything else (a
// c10::Error, std::bad_alloc, std::out_of_range, a crash, a sanitizer report) is a finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace fitsum::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Inputs that hold two documents (a config.json and a generation_config.json, a fitsum_state.json and a
// trainer_state.json) separate them by a NUL byte; the second is empty when there is none.
inline std::pair<std::string_view, std::string_view> two_documents(std::string_view text) {
  const auto split = text.find('\0');
  if (split == std::string_view::npos) return {text, std::string_view()};
  return {text.substr(0, split), text.substr(split + 1)};
}

// Writes the input to a file named `name` in a folder private to this process, and returns its path.
inline std::filesystem::path input_file(const std::string& name, std::string_view bytes) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("fitsum-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  const auto path = dir / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Runs `body`, letting only the documented exceptions pass.
template <typename Body>
void expect_only_documented_errors(Body&& body) {
  try {
    body();
  } catch (const std::invalid_argument&) {
  } catch (const std::runtime_error&) {
  }
}

}  // namespace fitsum::fuzz
