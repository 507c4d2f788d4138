// Implements include/fitsum/memory/fit.h: the order of the planning steps, and the sentences that explain them.
#include "fitsum/memory/fit.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "fitsum/util/bytes.h"

namespace fitsum::memory {

namespace {

std::uint64_t with_margin(std::uint64_t bytes, double margin) {
  return static_cast<std::uint64_t>(std::ceil(static_cast<double>(bytes) * (1.0 + margin)));
}

optim::OptimizerType other_optimizer(optim::OptimizerType type) {
  return type == optim::OptimizerType::adamw_torch ? optim::OptimizerType::adafactor
                                                   : optim::OptimizerType::adamw_torch;
}

std::string describe_static(const StaticMemory& fixed) {
  return util::format_bytes(fixed.total()) + " (" + util::format_bytes(fixed.weights) + " weights + " +
         util::format_bytes(fixed.gradients) + " gradients + " + util::format_bytes(fixed.optimizer_state) +
         " optimizer state)";
}

// Step 1: weights, gradients and optimizer state from parameter counts, before any probe. Returns a result when
// they alone exceed the budget (for the fixed optimizer, or for both when none is fixed).
std::optional<FitResult> refuse_on_static_memory(const model::ModelConfig& config, const FitRequest& request) {
  const auto counts = model::count_parameters(config);
  const auto needs = [&](optim::OptimizerType type) {
    return static_training_memory(counts, type, StorageDtype::fp32);
  };
  FitResult r;
  r.layers = std::max(config.encoder_layers, config.decoder_layers);
  std::ostringstream why;
  if (request.optimizer) {
    const auto fixed = needs(*request.optimizer);
    if (with_margin(fixed.total(), request.margin) <= request.budget) return std::nullopt;
    const auto other = other_optimizer(*request.optimizer);
    const auto alternative = needs(other);
    why << "max_memory " << util::format_bytes(request.budget) << " is too small for optim "
        << optim::to_string(*request.optimizer) << ": its weights, gradients and optimizer state alone need "
        << describe_static(fixed) << ", at least " << util::format_bytes(with_margin(fixed.total(), request.margin))
        << " with the planner's margin, before any activation";
    if (with_margin(alternative.total(), request.margin) < request.budget) {
      r.status = FitStatus::settings_too_large;
      why << ". A plan that fits starts from optim " << optim::to_string(other) << " ("
          << util::format_bytes(alternative.total()) << " before activations): leave optim unset (or auto) and the "
          << "planner chooses micro-batch and checkpointing too, or run `fitsum plan` with these arguments for the "
             "table";
    } else {
      r.status = FitStatus::nothing_fits;
    }
    r.minimum_budget = with_margin(std::min(fixed.total(), alternative.total()), request.margin);
  } else {
    const auto adamw = needs(optim::OptimizerType::adamw_torch);
    const auto adafactor = needs(optim::OptimizerType::adafactor);
    const auto cheapest = adamw.total() < adafactor.total() ? adamw : adafactor;
    if (with_margin(cheapest.total(), request.margin) <= request.budget) return std::nullopt;
    r.status = FitStatus::nothing_fits;
    r.minimum_budget = with_margin(cheapest.total(), request.margin);
    why << "max_memory " << util::format_bytes(request.budget) << " is too small for this model with any optimizer: "
        << "weights, gradients and the smallest optimizer state alone need " << describe_static(cheapest)
        << ", at least " << util::format_bytes(r.minimum_budget) << " with the planner's margin, before any activation";
  }
  r.explanation = why.str();
  return r;
}

PlanRequest plan_request(const FitRequest& request) {
  PlanRequest p;
  p.effective_batch = request.effective_batch;
  p.source_length = request.worst.source;
  p.target_length = request.worst.target;
  p.micro_batch = request.micro_batch;
  p.optimizer = request.optimizer;
  p.checkpointed_layers = request.checkpointed_layers;
  p.bf16 = request.bf16;
  p.budget = request.budget;
  p.margin = request.margin;
  return p;
}

// Step 4: nothing fits the request. With every knob free, is there a plan that does?
void explain_no_fit(FitResult& r, const FitRequest& request) {
  auto relaxed = plan_request(request);
  relaxed.micro_batch.reset();
  relaxed.optimizer.reset();
  relaxed.checkpointed_layers.reset();
  const auto free = choose_plan(*r.calibration, relaxed);
  const bool something_fixed = request.micro_batch || request.optimizer || request.checkpointed_layers;
  std::ostringstream why;
  why << "max_memory " << util::format_bytes(request.budget)
      << " is too small for these settings: " << r.plan.explanation;
  if (free.chosen && something_fixed) {
    r.status = FitStatus::settings_too_large;
    r.alternative = free.candidates[*free.chosen];
    why << ". A plan that fits: " << plan_arguments(r.alternative->knobs, r.layers) << " (predicted peak "
        << util::format_bytes(r.alternative->prediction.peak)
        << "); leave optim / gradient_checkpointing unset (or optim auto) to let the planner choose";
  } else {
    r.status = FitStatus::nothing_fits;
    why << ". Even micro-batch 1 with full checkpointing and adafactor needs "
        << util::format_bytes(free.minimum_budget);
  }
  r.minimum_budget = std::min(r.plan.minimum_budget, free.minimum_budget);
  r.explanation = why.str();
}

}  // namespace

FitResult fit_training(model::Seq2SeqLMImpl& model, const FitRequest& request) {
  if (request.budget == 0) throw std::invalid_argument("max_memory must be above 0");
  if (auto refused = refuse_on_static_memory(model.config(), request)) {
    refused->worst = request.worst;
    refused->budget = request.budget;
    return *refused;
  }
  CalibrationOptions options;
  options.max_source_length = request.worst.source;
  options.max_target_length = request.worst.target;
  options.bf16 = request.bf16;
  options.label_smoothing = request.label_smoothing;
  FitResult r;
  r.worst = request.worst;
  r.budget = request.budget;
  r.calibration = calibrate(model, options);
  r.layers = std::max(r.calibration->encoder_layers, r.calibration->decoder_layers);
  r.plan = choose_plan(*r.calibration, plan_request(request));
  if (r.plan.chosen) {
    r.status = FitStatus::fits;
    r.chosen = r.plan.candidates[*r.plan.chosen];
    r.minimum_budget = r.plan.minimum_budget;
    r.explanation = r.plan.explanation;
    return r;
  }
  explain_no_fit(r, request);
  return r;
}

PlanDoesNotFit::PlanDoesNotFit(FitResult result) : std::runtime_error(result.explanation), result_(std::move(result)) {}

std::string plan_arguments(const PlanKnobs& knobs, std::int64_t layers) {
  std::ostringstream out;
  out << "--per_device_train_batch_size " << knobs.micro_batch << " --gradient_accumulation_steps "
      << knobs.accumulation;
  if (knobs.checkpointed_layers > 0) out << " --gradient_checkpointing";
  if (knobs.checkpointed_layers > 0 && knobs.checkpointed_layers < layers) {
    out << " --gradient_checkpointing_layers " << knobs.checkpointed_layers;
  }
  out << " --optim " << optim::to_string(knobs.optimizer);
  if (knobs.bf16) out << " --bf16";
  return out.str();
}

}  // namespace fitsum::memory
