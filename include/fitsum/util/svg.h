// The pieces of a readable SVG chart, shared by the training curves and the memory report: "nice" ticks (1, 2, 5
// x 10^k) that cover a range, tick labels with as many decimals as the tick step needs, escaped text, and a plot
// area with its axes, gridlines, tick labels and axis titles drawn inside the given margins.
#pragma once

#include <string>
#include <vector>

namespace fitsum::util::svg {

// Ticks at multiples of a 1/2/5 x 10^k step, from at or below `low` to at or above `high` (about `count` of them).
std::vector<double> nice_ticks(double low, double high, int count = 5);
// A tick value with the decimals its step needs ("0.25", "1.5", "200").
std::string format_number(double value, double step);
// Text with &, <, > and " escaped for SVG.
std::string escape(const std::string& text);

struct PlotArea {
  double left = 0, top = 0, width = 0, height = 0;  // the plot's rectangle inside the image
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  double x(double value) const { return left + (value - x_min) / (x_max - x_min) * width; }
  double y(double value) const { return top + height - (value - y_min) / (y_max - y_min) * height; }
};

// The area whose value ranges are the outermost ticks of [x_low, x_high] and [y_low, y_high].
PlotArea fit_area(double left, double top, double width, double height, double x_low, double x_high, double y_low,
                  double y_high);

// Axes, gridlines and tick labels of `area` (ticks from nice_ticks over its ranges), the x-axis title below, the
// y-axis title rotated on the left: 80 px of margin on the left and 45 below hold them.
// Without `x_ticks` the x-axis has no ticks (a chart of categories labels its own).
std::string axes(const PlotArea& area, const std::string& x_title, const std::string& y_title, bool x_ticks = true);

}  // namespace fitsum::util::svg
