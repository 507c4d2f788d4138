// Checks of the SVG reports for the tests: texts that reach outside the image (width estimated at 0.62 em per
// character, rotated texts by their rotated extent), and rendering to PNG with rsvg-convert (Debian's librsvg2-bin).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace fitsum::test {

// Every <text> whose estimated box is not inside the image, described ("'budget 130 MiB' ends at x=812 > 800").
std::vector<std::string> svg_texts_outside_image(const std::string& svg);

// Renders `svg` to `png`; returns "" on success, else why not (rsvg-convert missing: the caller skips).
std::string render_svg_to_png(const std::filesystem::path& svg, const std::filesystem::path& png);

// The width and height in a PNG file's IHDR; {0, 0} when it is not a PNG.
std::pair<int, int> png_size(const std::filesystem::path& png);

}  // namespace fitsum::test
