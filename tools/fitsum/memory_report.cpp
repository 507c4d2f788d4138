// Implements tools/fitsum/memory_report.h: plain SVG (util/svg.h draws the axes). The y-axis is in MiB with ticks;
// the budget is a labelled dashed line; each candidate's label is written below its bar, rotated, with a bottom
// margin computed from the longest label so that nothing is clipped or overlaps the legend.
#include "memory_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

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

}  // namespace

void write_memory_report(const std::string& path, const memory::Plan& plan, std::int64_t layers, std::uint64_t budget,
                         const std::vector<MeasuredPeak>& measured) {
  const double bar = 26, gap = 8, left = 90, top = 50, height = 300;
  const double plan_width = static_cast<double>(plan.candidates.size()) * (bar + gap);
  const double steps_width = measured.empty() ? 0.0 : 40.0 + std::max(190.0, measured.size() * 14.0);
  const double plot_width = std::max(300.0, plan_width + steps_width + 10);
  std::size_t longest = 0;
  for (const auto& k : plan.candidates) longest = std::max(longest, candidate_label(k, plan).size());
  const double label_depth = static_cast<double>(longest) * 6.2 * 0.87 + 16;  // rotated 60 degrees, 10 px font
  const double legend_y = top + height + std::max(label_depth, 40.0) + 20;
  const double width = left + plot_width + 130, image_height = legend_y + 30;
  double top_mib = static_cast<double>(budget) / kMiB;
  for (const auto& k : plan.candidates) top_mib = std::max(top_mib, static_cast<double>(k.prediction.peak) / kMiB);
  for (const auto& m : measured) top_mib = std::max(top_mib, static_cast<double>(m.bytes) / kMiB);
  const auto area = util::svg::fit_area(left, top, plot_width, height, 0, 1, 0, top_mib * 1.02);
  const auto y = [&](double bytes) { return area.y(bytes / kMiB); };
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
    const double lx = x + bar / 2, ly = top + height + 10;
    svg << "<text x=\"" << lx << "\" y=\"" << ly << "\" text-anchor=\"end\" transform=\"rotate(-60 " << lx << " " << ly
        << ")\">" << util::svg::escape(candidate_label(k, plan)) << "</text>\n";
  }
  if (!measured.empty()) {
    const double x0 = left + 8 + plan_width + 40;
    for (std::size_t i = 0; i < measured.size(); ++i) {
      const double b = static_cast<double>(measured[i].bytes);
      svg << "<rect x=\"" << x0 + static_cast<double>(i) * 14 << "\" y=\"" << y(b) << "\" width=\"10\" height=\""
          << y(0) - y(b) << "\" fill=\"#59a14f\"><title>step " << measured[i].step << ": " << mib(b)
          << "</title></rect>\n";
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
  svg << "</svg>\n";
  util::write_file_atomic(path, svg.str());
}

}  // namespace fitsum::cli
