// Implements svg_check.h.
#include "svg_check.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "test_support.h"

namespace fitsum::test {

namespace {

double attribute(const std::string& tag, const std::string& name, double fallback) {
  const std::regex pattern("\\s" + name + "=\"(-?[0-9.eE+-]+)\"");
  std::smatch m;
  return std::regex_search(tag, m, pattern) ? std::stod(m[1]) : fallback;
}

std::string text_attribute(const std::string& tag, const std::string& name) {
  const std::regex pattern("\\s" + name + "=\"([^\"]*)\"");
  std::smatch m;
  return std::regex_search(tag, m, pattern) ? std::string(m[1]) : std::string();
}

std::size_t characters(const std::string& text) {  // entities and UTF-8 continuation bytes count once
  std::size_t n = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '&') i = text.find(';', i);
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++n;
  }
  return n;
}

}  // namespace

std::vector<std::string> svg_texts_outside_image(const std::string& svg) {
  const auto root_end = svg.find('>');
  const std::string root = svg.substr(0, root_end);
  const double width = attribute(root, "width", 0), height = attribute(root, "height", 0);
  const double root_font = attribute(root, "font-size", 16);
  std::vector<std::string> problems;
  const std::regex text_pattern("<text([^>]*)>([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), text_pattern); it != std::sregex_iterator(); ++it) {
    const std::string tag = (*it)[1], content = (*it)[2];
    const double font = attribute(tag, "font-size", root_font);
    const double length = 0.62 * font * static_cast<double>(characters(content));
    const double x = attribute(tag, "x", 0), y = attribute(tag, "y", 0);
    const std::string anchor = text_attribute(tag, "text-anchor");
    const double start = anchor == "end" ? -length : anchor == "middle" ? -length / 2 : 0.0;
    // Along the text's direction from (x, y): from `start` to `start + length`; rotated texts turn that direction.
    double angle = 0;
    const auto transform = text_attribute(tag, "transform");
    if (transform.rfind("rotate(", 0) == 0) angle = std::stod(transform.substr(7)) * M_PI / 180.0;
    for (double along : {start, start + length}) {
      const double px = x + along * std::cos(angle), py = y + along * std::sin(angle);
      for (double dy : {-0.8 * font, 0.2 * font}) {  // ascent above the baseline, descent below
        const double cx = px - dy * std::sin(angle), cy = py + dy * std::cos(angle);
        if (cx < 0 || cy < 0 || cx > width || cy > height) {
          std::ostringstream why;
          why << "'" << content << "' reaches (" << std::lround(cx) << ", " << std::lround(cy) << "), outside " << width
              << " x " << height;
          problems.push_back(why.str());
          break;
        }
      }
      if (!problems.empty() && problems.back().find("'" + content + "'") == 0) break;
    }
  }
  return problems;
}

std::string render_svg_to_png(const std::filesystem::path& svg, const std::filesystem::path& png) {
  if (std::system("command -v rsvg-convert >/dev/null 2>&1") != 0) {
    return "rsvg-convert not found: install librsvg2-bin (scripts/install-deps.sh) to render the SVG reports";
  }
  const auto r = run_command("rsvg-convert -o '" + png.string() + "' '" + svg.string() + "'");
  if (r.exit_code != 0) return "rsvg-convert failed: " + r.output;
  return "";
}

std::pair<int, int> png_size(const std::filesystem::path& png) {
  std::ifstream in(png, std::ios::binary);
  unsigned char header[24] = {};
  in.read(reinterpret_cast<char*>(header), sizeof header);
  if (!in || header[1] != 'P' || header[2] != 'N' || header[3] != 'G') return {0, 0};
  const auto be = [&](int at) {
    return (header[at] << 24) | (header[at + 1] << 16) | (header[at + 2] << 8) | header[at + 3];
  };
  return {be(16), be(20)};
}

}  // namespace fitsum::test
