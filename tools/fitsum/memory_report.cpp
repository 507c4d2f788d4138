// Implements tools/fitsum/memory_report.h: plain SVG, no dependencies.
#include "memory_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "fitsum/util/files.h"

namespace fitsum::cli {

namespace {

std::string mib(double bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.0f MiB", bytes / 1048576.0);
  return buffer;
}

}  // namespace

void write_memory_report(const std::string& path, const memory::Plan& plan, std::int64_t layers, std::uint64_t budget,
                         const std::vector<MeasuredPeak>& measured) {
  const double bar = 26, gap = 8, left = 70, top = 40, height = 300;
  const double plan_width = static_cast<double>(plan.candidates.size()) * (bar + gap);
  const double steps_width = measured.empty() ? 0.0 : 60.0 + static_cast<double>(measured.size()) * 14.0;
  const double width = left + plan_width + steps_width + 40;
  double top_bytes = static_cast<double>(budget);
  for (const auto& k : plan.candidates) top_bytes = std::max(top_bytes, static_cast<double>(k.prediction.peak));
  for (const auto& m : measured) top_bytes = std::max(top_bytes, static_cast<double>(m.bytes));
  top_bytes *= 1.05;
  const auto y = [&](double bytes) { return top + height - bytes / top_bytes * height; };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << top + height + 110
      << "\" font-family=\"sans-serif\" font-size=\"10\">\n";
  svg << "<text x=\"" << left << "\" y=\"20\" font-size=\"13\">Predicted peak per candidate"
      << (measured.empty() ? "" : "; measured peak per logged step") << " (budget " << mib(static_cast<double>(budget))
      << ")</text>\n";
  const char* colors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2"};
  const char* names[] = {"weights", "gradients", "optimizer state", "activations / step transient"};
  for (std::size_t i = 0; i < plan.candidates.size(); ++i) {
    const auto& k = plan.candidates[i];
    const auto& p = k.prediction;
    const double parts[] = {static_cast<double>(p.weights), static_cast<double>(p.gradients),
                            static_cast<double>(p.optimizer_state),
                            static_cast<double>(std::max(p.activations, p.optimizer_transient))};
    const double x = left + static_cast<double>(i) * (bar + gap);
    double base = 0;
    for (int j = 0; j < 4; ++j) {
      svg << "<rect x=\"" << x << "\" y=\"" << y(base + parts[j]) << "\" width=\"" << bar << "\" height=\""
          << parts[j] / top_bytes * height << "\" fill=\"" << colors[j] << "\""
          << (plan.chosen && *plan.chosen == i ? " stroke=\"black\" stroke-width=\"2\"" : "") << "/>\n";
      base += parts[j];
    }
    svg << "<text x=\"" << x + bar / 2 << "\" y=\"" << top + height + 12
        << "\" text-anchor=\"end\" transform=\"rotate(-60 " << x + bar / 2 << " " << top + height + 12 << ")\">"
        << k.knobs.micro_batch << "x" << k.knobs.accumulation << " "
        << memory::checkpointing_label(k.knobs, plan.encoder_layers, plan.decoder_layers) << " "
        << optim::to_string(k.knobs.optimizer) << (k.fits ? "" : " (no)") << "</text>\n";
  }
  if (!measured.empty()) {
    const double x0 = left + plan_width + 40;
    for (std::size_t i = 0; i < measured.size(); ++i) {
      const double b = static_cast<double>(measured[i].bytes);
      svg << "<rect x=\"" << x0 + static_cast<double>(i) * 14 << "\" y=\"" << y(b) << "\" width=\"10\" height=\""
          << b / top_bytes * height << "\" fill=\"#59a14f\"><title>step " << measured[i].step << ": " << mib(b)
          << "</title></rect>\n";
    }
    svg << "<text x=\"" << x0 << "\" y=\"" << top + height + 14 << "\">measured peak per logged step</text>\n";
  }
  svg << "<line x1=\"" << left << "\" x2=\"" << width - 20 << "\" y1=\"" << y(static_cast<double>(budget)) << "\" y2=\""
      << y(static_cast<double>(budget)) << "\" stroke=\"black\" stroke-dasharray=\"4 3\"/>\n";
  svg << "<text x=\"4\" y=\"" << y(static_cast<double>(budget)) + 3 << "\">budget</text>\n";
  for (int j = 0; j < 4; ++j) {
    svg << "<rect x=\"" << left + j * 150 << "\" y=\"" << top + height + 85 << "\" width=\"10\" height=\"10\" fill=\""
        << colors[j] << "\"/><text x=\"" << left + j * 150 + 14 << "\" y=\"" << top + height + 94 << "\">" << names[j]
        << "</text>\n";
  }
  svg << "</svg>\n";
  util::write_file_atomic(path, svg.str());
}

}  // namespace fitsum::cli
