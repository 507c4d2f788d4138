// The memory planner: predicts the peak memory and the step time of a training configuration before training, and
// chooses the fastest configuration that fits a budget (`fitsum plan`, `fitsum train --max_memory`).
//
// Peak = weights + gradients + optimizer state (from parameter counts, static_memory.h)
//      + max(transient of one micro-step, transient of the optimizer step).
// The micro-step transient (activations, logits and loss, the dense embedding gradients, allocator slack) is not
// modelled by hand: a short calibration probe runs forward/backward passes of the actual model (short lengths up
// to micro-batch 8, and micro-batches 1, 2 and 4 at the run's longest lengths), measures each exactly with the
// tracking allocator (gradients already allocated by a warm-up, so only the transient is seen) and fits its known
// form, the larger of two phases (ActivationFit)
//     a0 + B * (a1 S + a2 T + a3 S^2 + a4 T^2 + a5 S T)        (B micro-batch, S source, T target length)
//     e0 + B * (e1 S + e2 T)
// once without and once with activation checkpointing of every layer; N checkpointed layers interpolate linearly.
// The same passes are timed, which gives the compute rate and the recompute cost of checkpointing. The optimizer
// step's transient and time are measured on a stand-alone tensor of the model's largest parameter.
//
// Planning is for the worst batch the data can produce after truncation: every row at the longest source and
// target length. It does not model the CUDA caching allocator's fragmentation (validated on the CPU only).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "fitsum/memory/static_memory.h"
#include "fitsum/model/seq2seq.h"

namespace fitsum::memory {

// ---- The budget (--max_memory) ----

// Free memory of the device: MemAvailable of the kernel on the CPU, free device memory on CUDA.
std::uint64_t available_memory(const c10::Device& device);
// "auto" or a size such as "6GiB"; throws std::invalid_argument for anything else.
std::uint64_t resolve_memory_budget(const std::string& spec, const c10::Device& device);
// Makes `bytes` a hard limit: the tracking allocator's limit on the CPU (allocations beyond it raise
// c10::OutOfMemoryError), the caching allocator's memory fraction on CUDA. 0 removes the limit.
void apply_memory_budget(const c10::Device& device, std::uint64_t bytes);

// ---- Calibration ----

struct BatchShape {
  std::int64_t batch = 1;
  std::int64_t source = 1;  // encoder tokens per row
  std::int64_t target = 1;  // label tokens per row
};

// Bytes of a micro-step's transient: the larger of two phases,
//   while activations are stored (start of backward):  a0 + B * (a1 S + a2 T + a3 S^2 + a4 T^2 + a5 S T)
//   while the embedding gradients are summed (its end): e0 + B * (e1 S + e2 T)
// For small batches the second (a large constant: dense vocabulary x d_model gradients) sets the peak, for large
// ones the first; a single least-squares form fitted across both would under-predict large batches.
struct ActivationFit {
  std::array<double, 6> coefficients{};      // a0 .. a5
  std::array<double, 3> end_coefficients{};  // e0 .. e2
  double predict(const BatchShape& shape) const;
};
// c0 + B * (c1 (S + T) + c2 (S^2 + T^2 + S T)): seconds of a micro-step's forward and backward.
struct TimeFit {
  std::array<double, 3> coefficients{};
  double floor_seconds = 0.0;  // the fastest probe: predictions never go below it
  double predict(const BatchShape& shape) const;
};

struct OptimizerCost {
  std::uint64_t transient_bytes = 0;  // temporaries of clip + step beyond the optimizer state
  double seconds = 0.0;               // clip + step over the whole model
};

struct ProbeSample {
  BatchShape shape;
  bool checkpointed = false;
  std::uint64_t transient_bytes = 0;
  double seconds = 0.0;
};

struct Calibration {
  model::ParameterCounts counts;
  std::uint64_t weight_bytes = 0;    // measured: parameters and buffers as stored
  std::uint64_t gradient_bytes = 0;  // measured: one per trainable parameter
  std::int64_t encoder_layers = 0;
  std::int64_t decoder_layers = 0;
  bool bf16 = false;
  ActivationFit activations_plain;
  ActivationFit activations_checkpointed;
  TimeFit time_plain;
  TimeFit time_checkpointed;
  OptimizerCost adamw;
  OptimizerCost adafactor;
  std::vector<ProbeSample> samples;
  double probe_seconds = 0.0;

  const OptimizerCost& optimizer(optim::OptimizerType kind) const {
    return kind == optim::OptimizerType::adamw_torch ? adamw : adafactor;
  }
};

struct CalibrationOptions {
  std::int64_t max_source_length = 512;  // probe shapes stay at or below these
  std::int64_t max_target_length = 128;
  bool bf16 = false;
  double label_smoothing = 0.0;
};

// Runs the probe on `model` (on its device). Gradients are left allocated and zero, checkpointing off, the
// global random state as it was. Takes a few seconds for small models.
Calibration calibrate(model::Seq2SeqLMImpl& model, const CalibrationOptions& options);

// ---- Prediction ----

struct PlanKnobs {
  std::int64_t micro_batch = 1;          // per_device_train_batch_size
  std::int64_t accumulation = 1;         // gradient_accumulation_steps
  std::int64_t checkpointed_layers = 0;  // per stack; >= the stack depth means all
  optim::OptimizerType optimizer = optim::OptimizerType::adamw_torch;
  bool bf16 = false;
};

struct Prediction {
  std::uint64_t weights = 0;
  std::uint64_t gradients = 0;
  std::uint64_t optimizer_state = 0;
  std::uint64_t activations = 0;  // the micro-step transient
  std::uint64_t optimizer_transient = 0;
  std::uint64_t peak = 0;
  double step_seconds = 0.0;
  double tokens_per_second = 0.0;  // at the worst shape: B x (S + T) tokens per row
};

// `worst` gives the lengths; its batch is ignored (the knobs' micro-batch is used).
Prediction predict(const Calibration& calibration, const PlanKnobs& knobs, const BatchShape& worst);

// ---- Choosing ----

// Predictions are within a few percent (tests/model/planner_test.cpp); the margin absorbs the rest.
constexpr double kPlanMargin = 0.05;

struct PlanRequest {
  std::int64_t effective_batch = 8;  // per_device_train_batch_size x gradient_accumulation_steps
  std::int64_t source_length = 512;  // the worst batch after truncation
  std::int64_t target_length = 128;
  std::optional<std::int64_t> micro_batch;          // fixed by --no_resplit
  std::optional<optim::OptimizerType> optimizer;    // fixed by an explicit --optim
  std::optional<std::int64_t> checkpointed_layers;  // fixed by an explicit --gradient_checkpointing[_layers]
  bool bf16 = false;
  std::uint64_t budget = 0;
  double margin = kPlanMargin;
};

struct Candidate {
  PlanKnobs knobs;
  Prediction prediction;
  bool fits = false;
};

struct Plan {
  std::vector<Candidate> candidates;
  std::optional<std::size_t> chosen;  // index into candidates; empty when none fits
  std::uint64_t minimum_budget = 0;   // the smallest budget under which some candidate fits (with the margin)
  std::string explanation;            // why this one (or why none)
};

Plan choose_plan(const Calibration& calibration, const PlanRequest& request);

// "none", "3 of 6", "all" for a stack of `layers`.
std::string checkpointing_label(std::int64_t checkpointed_layers, std::int64_t layers);

}  // namespace fitsum::memory
