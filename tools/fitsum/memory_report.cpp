// Implements tools/fitsum/memory_report.h: plain SVG (util/svg.h draws the axes). The y-axis is in MiB with ticks
// and ends at most at 1.5 x the budget (taller bars are cut there, marked, and their values written above them);
// the budget is a labelled dashed line; each candidate's label is written below its bar, rotated, with a bottom
// margin computed from the longest label so that nothing is clipped or overlaps the legend, whose second row says
// what "(no)", the outline and a cut mean.
#include "memory_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "fitsum/util/bytes.h"
#include "fitsum/util/files.h"
#include "fitsum/util/svg.h"

namespace fitsum::cli {

namespace {

constexpr double kMiB = 1048576.0;

std::string mib(double bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.0f MiB", bytes / kMiB);
  return buffer;
}

std::string candidate_label(const memory::Candidate& k, const memory::Plan& plan) {
  return std::to_string(k.knobs.micro_batch) + "x" + std::to_string(k.knobs.accumulation) + " " +
         memory::checkpointing_label(k.knobs, plan.encoder_layers, plan.decoder_layers) + " " +
         optim::to_string(k.knobs.optimizer) + (k.fits ? "" : " (no)");
}

const char* const kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2"};
const char* const kNames[] = {"weights", "gradients", "optimizer state", "activations / step transient"};

constexpr double kClip = 1.5;       // the y-axis ends at the first tick past 1.5 x the budget at most
constexpr double kValueSpace = 62;  // room above the plot for the values of cut bars, rotated
constexpr double kCharWidth = 6.2;  // an estimate of a character's width at the 10 px font

// The height of a candidate's stacked bar: its four parts as drawn.
double stacked_bytes(const memory::Prediction& p) {
  return static_cast<double>(p.weights) + static_cast<double>(p.gradients) + static_cast<double>(p.optimizer_state) +
         static_cast<double>(std::max(p.activations, p.optimizer_transient));
}

// A bar cut at the axis' top (y `cut_y`): a white zigzag across its top and its value written above the plot.
std::string cut_bar(double x, double bar, double cut_y, double top, double bytes) {
  std::ostringstream out;
  const double z = cut_y + 7;
  out << "<polyline points=\"" << x << "," << z << " " << x + bar / 4 << "," << z - 4 << " " << x + bar / 2 << "," << z
      << " " << x + 3 * bar / 4 << "," << z - 4 << " " << x + bar << "," << z
      << "\" fill=\"none\" stroke=\"white\" stroke-width=\"3\"/>\n";
  const double vx = x + bar / 2 + 3, vy = top - 4;
  out << "<text x=\"" << vx << "\" y=\"" << vy << "\" transform=\"rotate(-90 " << vx << " " << vy << ")\">"
      << util::format_bytes(static_cast<std::uint64_t>(bytes)) << "</text>\n";
  return out.str();
}

// The second legend row: what the markers on the bars mean.
struct MarkerKey {
  std::string swatch;  // "text": a word in the swatch's place; "outline"; "cut"
  std::string text;
};

std::vector<MarkerKey> marker_keys(bool clipped) {
  std::vector<MarkerKey> keys = {{"(no)", "does not fit the budget"}, {"outline", "chosen"}};
  if (clipped) {
    keys.push_back({"cut", "taller than the axis (which ends near 1.5 x the budget): cut, its value written above"});
  }
  return keys;
}

double key_width(const MarkerKey& key) {
  const double swatch =
      key.swatch == "outline" || key.swatch == "cut" ? 14 : static_cast<double>(key.swatch.size()) * kCharWidth + 4;
  return swatch + static_cast<double>(key.text.size()) * kCharWidth + 24;
}

double row_width(const std::vector<MarkerKey>& keys) {
  double width = 0;
  for (const auto& key : keys) width += key_width(key);
  return width;
}

std::string marker_legend(const std::vector<MarkerKey>& keys, double x, double y) {
  std::ostringstream out;
  for (const auto& key : keys) {
    double text_x = x + 14;
    if (key.swatch == "outline") {
      out << "<rect x=\"" << x << "\" y=\"" << y - 9 << "\" width=\"10\" height=\"10\" fill=\"white\" stroke=\"black\" "
          << "stroke-width=\"2\"/>";
    } else if (key.swatch == "cut") {
      out << "<polyline points=\"" << x << "," << y - 3 << " " << x + 2.5 << "," << y - 7 << " " << x + 5 << ","
          << y - 3 << " " << x + 7.5 << "," << y - 7 << " " << x + 10 << "," << y - 3
          << "\" fill=\"none\" stroke=\"black\" stroke-width=\"1.5\"/>";
    } else {
      out << "<text x=\"" << x << "\" y=\"" << y << "\" font-weight=\"bold\">" << util::svg::escape(key.swatch)
          << "</text>";
      text_x = x + static_cast<double>(key.swatch.size()) * kCharWidth + 4;
    }
    out << "<text x=\"" << text_x << "\" y=\"" << y << "\">" << util::svg::escape(key.text) << "</text>\n";
    x += key_width(key);
  }
  return out.str();
}

}  // namespace

void write_memory_report(const std::string& path, const memory::Plan& plan, std::int64_t layers, std::uint64_t budget,
                         const std::vector<MeasuredPeak>& measured) {
  // The y-axis ends at the tallest bar or at kClip x the budget, whichever is lower, so that the candidates that fit
  // stay readable next to ones many times the budget; a bar cut there is marked and its value written above it.
  const double budget_mib = static_cast<double>(budget) / kMiB;
  double tallest_mib = budget_mib;
  for (const auto& k : plan.candidates) tallest_mib = std::max(tallest_mib, stacked_bytes(k.prediction) / kMiB);
  for (const auto& m : measured) tallest_mib = std::max(tallest_mib, static_cast<double>(m.bytes) / kMiB);
  const double axis_top_mib = std::min(tallest_mib, kClip * budget_mib) * 1.02;

  const double bar = 26, gap = 8, left = 90, height = 300;
  // The axis ends at the first tick at or above axis_top_mib; a bar past it is cut at the frame's top.
  const double clip_bytes = util::svg::nice_ticks(0, axis_top_mib).back() * kMiB;
  const bool clipped = tallest_mib * kMiB > clip_bytes;
  const double top = clipped ? 50 + kValueSpace : 50;  // the values of cut bars are written above the plot
  const double plan_width = static_cast<double>(plan.candidates.size()) * (bar + gap);
  const double steps_width = measured.empty() ? 0.0 : 40.0 + std::max(190.0, measured.size() * 14.0);
  const double plot_width = std::max(300.0, plan_width + steps_width + 10);
  std::size_t longest = 0;
  for (const auto& k : plan.candidates) longest = std::max(longest, candidate_label(k, plan).size());
  const double label_depth = static_cast<double>(longest) * kCharWidth * 0.87 + 16;  // rotated 60 degrees
  const double legend_y = top + height + std::max(label_depth, 40.0) + 20;
  const auto keys = marker_keys(clipped);
  const double width = std::max({left + plot_width + 130, left + 4 * 150 + 10, left + row_width(keys) + 10});
  const double image_height = legend_y + 16 + 30;
  const auto area = util::svg::fit_area(left, top, plot_width, height, 0, 1, 0, axis_top_mib);
  const auto y = [&](double bytes) { return area.y(std::min(bytes, clip_bytes) / kMiB); };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << image_height
      << "\" font-family=\"sans-serif\" font-size=\"10\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << left << "\" y=\"22\" font-size=\"13\">Predicted peak memory per candidate"
      << (measured.empty() ? "" : "; measured peak per logged step") << " (budget " << mib(static_cast<double>(budget))
      << ")</text>\n";
  // No x ticks: the x-axis holds candidates, labelled one by one below.
  svg << util::svg::axes(area, "", "memory (MiB)", /*x_ticks=*/false);
  for (std::size_t i = 0; i < plan.candidates.size(); ++i) {
    const auto& k = plan.candidates[i];
    const auto& p = k.prediction;
    const double parts[] = {static_cast<double>(p.weights), static_cast<double>(p.gradients),
                            static_cast<double>(p.optimizer_state),
                            static_cast<double>(std::max(p.activations, p.optimizer_transient))};
    const double x = left + 8 + static_cast<double>(i) * (bar + gap);
    double base = 0;
    for (int j = 0; j < 4; ++j) {
      svg << "<rect x=\"" << x << "\" y=\"" << y(base + parts[j]) << "\" width=\"" << bar << "\" height=\""
          << y(base) - y(base + parts[j]) << "\" fill=\"" << kColors[j] << "\""
          << (plan.chosen && *plan.chosen == i ? " stroke=\"black\" stroke-width=\"2\"" : "") << "/>\n";
      base += parts[j];
    }
    if (base > clip_bytes) svg << cut_bar(x, bar, y(clip_bytes), top, base);
    const double lx = x + bar / 2, ly = top + height + 10;
    svg << "<text x=\"" << lx << "\" y=\"" << ly << "\" text-anchor=\"end\" transform=\"rotate(-60 " << lx << " " << ly
        << ")\">" << util::svg::escape(candidate_label(k, plan)) << "</text>\n";
  }
  if (!measured.empty()) {
    const double x0 = left + 8 + plan_width + 40;
    for (std::size_t i = 0; i < measured.size(); ++i) {
      const double b = static_cast<double>(measured[i].bytes);
      const double x = x0 + static_cast<double>(i) * 14;
      svg << "<rect x=\"" << x << "\" y=\"" << y(b) << "\" width=\"10\" height=\"" << y(0) - y(b)
          << "\" fill=\"#59a14f\"><title>step " << measured[i].step << ": " << mib(b) << "</title></rect>\n";
      if (b > clip_bytes) svg << cut_bar(x, 10, y(clip_bytes), top, b);
    }
    svg << "<text x=\"" << x0 << "\" y=\"" << top + height + 16 << "\">measured peak per logged step</text>\n";
  }
  const double budget_y = y(static_cast<double>(budget));
  svg << "<line x1=\"" << left << "\" x2=\"" << left + plot_width << "\" y1=\"" << budget_y << "\" y2=\"" << budget_y
      << "\" stroke=\"black\" stroke-dasharray=\"4 3\"/>\n";
  svg << "<text x=\"" << left + plot_width + 6 << "\" y=\"" << budget_y + 4 << "\">budget "
      << mib(static_cast<double>(budget)) << "</text>\n";
  for (int j = 0; j < 4; ++j) {
    svg << "<rect x=\"" << left + j * 150 << "\" y=\"" << legend_y - 9 << "\" width=\"10\" height=\"10\" fill=\""
        << kColors[j] << "\"/><text x=\"" << left + j * 150 + 14 << "\" y=\"" << legend_y << "\">" << kNames[j]
        << "</text>\n";
  }
  svg << marker_legend(keys, left, legend_y + 16);
  svg << "</svg>\n";
  util::write_file_atomic(path, svg.str());
}

}  // namespace fitsum::cli
