// Implements include/fitsum/util/svg.h.
#include "fitsum/util/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace fitsum::util::svg {

namespace {

double nice_step(double span, int count) {
  const double raw = span / std::max(1, count);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * magnitude) return m * magnitude;
  }
  return 10.0 * magnitude;
}

}  // namespace

std::vector<double> nice_ticks(double low, double high, int count) {
  if (!(high > low)) {  // one value: a range around it
    const double pad = low == 0.0 ? 1.0 : std::abs(low) * 0.1;
    low -= pad;
    high += pad;
  }
  const double step = nice_step(high - low, count);
  std::vector<double> ticks;
  const double first = std::floor(low / step + 1e-9) * step;
  for (double t = first; t < high + step * (1 - 1e-9); t += step) ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

std::string format_number(double value, double step) {
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  char text[48];
  std::snprintf(text, sizeof text, "%.*f", std::min(decimals, 8), value);
  return text;
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

PlotArea fit_area(double left, double top, double width, double height, double x_low, double x_high, double y_low,
                  double y_high) {
  const auto xs = nice_ticks(x_low, x_high), ys = nice_ticks(y_low, y_high);
  return {left, top, width, height, xs.front(), xs.back(), ys.front(), ys.back()};
}

std::string axes(const PlotArea& a, const std::string& x_title, const std::string& y_title, bool x_ticks) {
  std::ostringstream svg;
  const auto xs = nice_ticks(a.x_min, a.x_max), ys = nice_ticks(a.y_min, a.y_max);
  const double x_step = xs.size() > 1 ? xs[1] - xs[0] : 1.0, y_step = ys.size() > 1 ? ys[1] - ys[0] : 1.0;
  for (double t : ys) {
    if (t < a.y_min - y_step * 1e-6 || t > a.y_max + y_step * 1e-6) continue;
    svg << "<line x1=\"" << a.left << "\" x2=\"" << a.left + a.width << "\" y1=\"" << a.y(t) << "\" y2=\"" << a.y(t)
        << "\" stroke=\"#e0e0e0\"/>\n<text x=\"" << a.left - 6 << "\" y=\"" << a.y(t) + 4 << "\" text-anchor=\"end\">"
        << format_number(t, y_step) << "</text>\n";
  }
  for (double t : xs) {
    if (!x_ticks) break;
    if (t < a.x_min - x_step * 1e-6 || t > a.x_max + x_step * 1e-6) continue;
    svg << "<line x1=\"" << a.x(t) << "\" x2=\"" << a.x(t) << "\" y1=\"" << a.top + a.height << "\" y2=\""
        << a.top + a.height + 5 << "\" stroke=\"black\"/>\n<text x=\"" << a.x(t) << "\" y=\"" << a.top + a.height + 18
        << "\" text-anchor=\"middle\">" << format_number(t, x_step) << "</text>\n";
  }
  svg << "<rect x=\"" << a.left << "\" y=\"" << a.top << "\" width=\"" << a.width << "\" height=\"" << a.height
      << "\" fill=\"none\" stroke=\"black\"/>\n";
  svg << "<text x=\"" << a.left + a.width / 2 << "\" y=\"" << a.top + a.height + 36 << "\" text-anchor=\"middle\">"
      << escape(x_title) << "</text>\n";
  const double yx = a.left - 62, yy = a.top + a.height / 2;
  svg << "<text x=\"" << yx << "\" y=\"" << yy << "\" text-anchor=\"middle\" transform=\"rotate(-90 " << yx << " " << yy
      << ")\">" << escape(y_title) << "</text>\n";
  return svg.str();
}

}  // namespace fitsum::util::svg
