// How `fitsum plan` and `fitsum train --max_memory` print a plan (memory/fit.h makes it): a table of every
// candidate, or JSON for scripts.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fitsum/memory/fit.h"

namespace fitsum::cli {

std::string plan_table(const memory::FitResult& fit);
nlohmann::ordered_json candidate_json(const memory::Candidate& candidate);
nlohmann::ordered_json plan_json(const memory::FitResult& fit, std::uint64_t budget);

}  // namespace fitsum::cli
