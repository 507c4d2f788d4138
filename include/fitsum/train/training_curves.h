// output_dir/training_curves.svg: the training loss and every evaluation metric of a run's log_history against the
// optimizer step, readable without a viewer's help. One panel per scale: the losses (training and evaluation), the
// ROUGE scores, then each other evaluation metric (gen_len); each with axes, ticks, tick values, a legend that
// gives every series' last value, and margins that hold all the text. Timings and memory are left out.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace fitsum::train {

std::string training_curves_svg(const nlohmann::ordered_json& log_history, const std::string& title);

}  // namespace fitsum::train
