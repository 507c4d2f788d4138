// Whole files written gzip-compressed (zlib), and read back plain or gzip-compressed: the records a GPU run brings
// back (allocator history, profiler traces) are text that compresses tenfold.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace fitsum::util {

// Writes `data` gzip-compressed to `path`, through a temporary file beside it renamed into place, so that a run
// stopped midway leaves no partial file under the name. Throws std::runtime_error naming the file.
void write_gzip_file(const std::filesystem::path& path, std::string_view data);

// The text of `path`, inflated when it is gzip (recognized by its first bytes, as DataFileStream does); throws
// std::runtime_error naming the file when it cannot be read, is corrupt, or its text passes `max_bytes`.
std::string read_text_file(const std::filesystem::path& path, std::string_view what,
                           std::uint64_t max_bytes = std::uint64_t{1} << 30);

}  // namespace fitsum::util
