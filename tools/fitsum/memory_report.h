// --memory_report report.svg: a picture of the plan (stacked bars of each candidate's predicted breakdown against
// the budget) and, after training, the measured peak of every logged step against the budget and the prediction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fitsum/memory/planner.h"

namespace fitsum::cli {

struct MeasuredPeak {
  std::int64_t step = 0;
  std::uint64_t bytes = 0;
};

// Writes the SVG; `measured` may be empty (fitsum plan). Throws std::runtime_error when the file cannot be written.
void write_memory_report(const std::string& path, const memory::Plan& plan, std::int64_t layers, std::uint64_t budget,
                         const std::vector<MeasuredPeak>& measured);

}  // namespace fitsum::cli
