// Implements include/fitsum/train/memory_plan.h.
#include "fitsum/train/memory_plan.h"

#include <cstring>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fitsum/memory/calibration.h"
#include "fitsum/memory/planner.h"

namespace fitsum::train {

namespace {

// Rank 0 runs the calibration probe and the others plan with its numbers.
memory::Calibration share_rank_zero_calibration(
    ProcessGroup& group, const std::function<memory::Calibration()>& probe,
    const std::function<memory::Calibration(const std::vector<double>&)>& from_numbers, const Report& report) {
  // Rank 0's numbers as bytes (none: its probe failed), through broadcast_string's length and payload.
  std::optional<memory::Calibration> own;
  std::string sent;
  std::exception_ptr failed;
  if (group.rank() == 0) {
    try {
      own = probe();
      const auto numbers = memory::calibration_numbers(*own);
      sent.assign(reinterpret_cast<const char*>(numbers.data()), numbers.size() * sizeof(double));
    } catch (...) {
      failed = std::current_exception();
    }
  }
  const auto received = group.broadcast_string(sent, 0);
  if (failed) std::rethrow_exception(failed);
  if (received.empty()) {
    throw std::runtime_error("rank 0's calibration probe failed (its log says why); this process plans with it");
  }
  if (own) return *own;
  std::vector<double> numbers(received.size() / sizeof(double));
  std::memcpy(numbers.data(), received.data(), numbers.size() * sizeof(double));
  auto calibration = from_numbers(numbers);
  const auto line = "planning with rank 0's calibration probe (" + std::to_string(calibration.samples.size()) +
                    " passes) instead of probing here";
  // A line about this process alone (Report::process).
  if (report.process) {
    report.process(line);
  } else if (report.info) {
    report.info(line);
  }
  return calibration;
}

}  // namespace

memory::FitResult plan_and_apply(model::Seq2SeqLMImpl& model, TrainingArguments& args,
                                 const BudgetPlanOptions& options, const util::Runtime& runtime, const Report& report) {
  const auto& device = runtime.device;
  model.to(device);
  auto request = make_fit_request(args, options.fixed, options.worst, options.budget, options.world_size);
  request.cuda_alloc_conf = runtime.cuda_alloc_conf;  // on CUDA the budget caps reserved bytes under them
  request.evaluation = options.evaluation;
  if (const auto& group = options.share_calibration) {
    request.share_calibration = [&group, &report](const auto& probe, const auto& from_numbers) {
      return share_rank_zero_calibration(*group, probe, from_numbers, report);
    };
  }
  auto fit = memory::fit_training(model, request);
  if (fit.status != memory::FitStatus::fits) throw memory::PlanDoesNotFit(std::move(fit));
  for (const auto* warning : {&fit.optimizer_warning, &fit.evaluation_warning}) {
    if (!warning->empty() && report.warning) report.warning(*warning);
  }
  apply_plan(args, fit.chosen->knobs, model.config());
  memory::apply_memory_budget(device, options.budget);
  return fit;
}

}  // namespace fitsum::train
