// Implements include/fitsum/train/training_curves.h.
#include "fitsum/train/training_curves.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <vector>

#include "fitsum/util/svg.h"

namespace fitsum::train {

namespace {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (step, value)
};

struct Panel {
  std::string y_title;
  std::vector<Series> series;
};

bool is_curve_metric(const std::string& key) {
  if (key.rfind("eval_", 0) != 0) return false;
  for (const char* part : {"runtime", "per_second", "samples"}) {
    if (key.find(part) != std::string::npos) return false;
  }
  return true;
}

// The series of the log history, grouped into panels by scale.
std::vector<Panel> panels_of(const nlohmann::ordered_json& history) {
  Series train{"train loss", {}};
  std::vector<std::string> order;
  std::map<std::string, Series> eval;
  for (const auto& entry : history) {
    if (!entry.contains("step") || entry.contains("train_runtime")) continue;
    const double step = entry["step"].get<double>();
    if (entry.contains("loss") && entry["loss"].is_number()) train.points.emplace_back(step, entry["loss"]);
    for (const auto& item : entry.items()) {
      if (!is_curve_metric(item.key()) || !item.value().is_number()) continue;
      if (!eval.count(item.key())) order.push_back(item.key());
      auto& s = eval[item.key()];
      s.name = item.key();
      s.points.emplace_back(step, item.value().get<double>());
    }
  }
  std::vector<Panel> panels;
  Panel loss{"loss", {}}, rouge{"ROUGE F1 x 100", {}};
  if (!train.points.empty()) loss.series.push_back(train);
  std::vector<Panel> others;
  for (const auto& key : order) {
    if (key == "eval_loss")
      loss.series.push_back(eval[key]);
    else if (key.rfind("eval_rouge", 0) == 0)
      rouge.series.push_back(eval[key]);
    else
      others.push_back({key.substr(5), {eval[key]}});
  }
  for (auto* p : {&loss, &rouge}) {
    if (!p->series.empty()) panels.push_back(*p);
  }
  panels.insert(panels.end(), others.begin(), others.end());
  return panels;
}

const char* const kColors[] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2"};

std::string last_value(const Series& s) {
  std::ostringstream text;
  text.precision(4);
  text << s.points.back().second;
  return text.str();
}

// One panel: plot area on the left, legend on the right (name and last value of each series).
std::string panel_svg(const Panel& panel, double top, double max_step) {
  double low = INFINITY, high = -INFINITY;
  for (const auto& s : panel.series) {
    for (const auto& [step, value] : s.points) {
      low = std::min(low, value);
      high = std::max(high, value);
    }
  }
  const auto area = util::svg::fit_area(90, top, 510, 200, 0, max_step, low, high);
  std::ostringstream svg;
  svg << util::svg::axes(area, "optimizer step", panel.y_title);
  for (std::size_t i = 0; i < panel.series.size(); ++i) {
    const auto& s = panel.series[i];
    const char* color = kColors[i % 6];
    svg << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
    for (const auto& [step, value] : s.points) svg << area.x(step) << "," << area.y(value) << " ";
    svg << "\"/>\n";
    for (const auto& [step, value] : s.points) {
      svg << "<circle cx=\"" << area.x(step) << "\" cy=\"" << area.y(value) << "\" r=\"2.5\" fill=\"" << color
          << "\"/>\n";
    }
    const double ly = top + 14 + 18 * static_cast<double>(i);
    svg << "<rect x=\"615\" y=\"" << ly - 9 << "\" width=\"12\" height=\"10\" fill=\"" << color
        << "\"/>\n<text x=\"632\" y=\"" << ly << "\">" << util::svg::escape(s.name) << " (last " << last_value(s)
        << ")</text>\n";
  }
  return svg.str();
}

}  // namespace

std::string training_curves_svg(const nlohmann::ordered_json& log_history, const std::string& title) {
  const auto panels = panels_of(log_history);
  double max_step = 1;
  for (const auto& p : panels) {
    for (const auto& s : p.series) max_step = std::max(max_step, s.points.back().first);
  }
  const double panel_height = 270, width = 860;
  const double height = 50 + panel_height * static_cast<double>(std::max<std::size_t>(1, panels.size()));
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"90\" y=\"24\" font-size=\"15\">" << util::svg::escape(title) << "</text>\n";
  if (panels.empty()) svg << "<text x=\"90\" y=\"60\">nothing was logged</text>\n";
  for (std::size_t i = 0; i < panels.size(); ++i) {
    svg << panel_svg(panels[i], 50 + panel_height * static_cast<double>(i), max_step);
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace fitsum::train
