// The memory planner: predicts the peak memory and the step time of a training configuration before training, and
// chooses the fastest configuration that fits a budget (`fitsum plan`, `fitsum train --max_memory`).
//
// Peak = weights + gradients + optimizer state (from parameter counts, static_memory.h)
//      + max(transient of one micro-step, transient of the optimizer step, evaluation's transient).
// Evaluation (the eval loss and generation with beams and the key/value cache, evaluation_memory.h) is counted from
// the model's shapes; the planner lowers per_device_eval_batch_size until it fits.
//
// The micro-step transient is measured, not modelled by hand, on reduced-depth copies of the model (the same
// config with 1 + 1 and 2 + 2 layers, random weights, the real vocabulary and widths), with and without activation
// checkpointing, at seven batch shapes (five for the deeper copy) up to the run's longest lengths. The tracking allocator gives each probe's
// bytes exactly: the activations stored when the forward pass ends, the peaks of the forward pass's two parts (until
// the encoder's output, then the decoder, head and loss) and of the backward pass's two phases (the decoder's, until
// the gradient of the encoder output is complete; then the encoder's, which holds only encoder activations). The
// loss head's two modes (kept logits or vocabulary chunks, calibration.h LossHeadModes) differ by terms counted
// exactly, so a probe in one mode predicts a micro-batch in the other. The differences between the depths give, per shape, what one layer of each stack stores
// (plain or checkpointed) and what the rest of the step holds (LayerMemory); each is then fitted in the shape,
//     c0 + B * (c1 S + c2 T + c3 S^2 + c4 T^2 + c5 S T)        (B micro-batch, S source, T target length),
// and the full depth is predicted per layer. Backward runs the chain top down: a checkpointed layer recomputes its
// activations while the layers below it still hold theirs, so the cheapest layers to checkpoint are the bottom ones
// of each stack and the choice of a set reduces, exactly, to how many encoder and how many decoder layers
// (PlanKnobs::encoder_checkpointed / decoder_checkpointed, placed bottom first).
//
// Speed is counted work over measured rates: the matrix-product FLOPs of a micro-step (model::training_matmul_flops)
// plus the forward FLOPs of every recomputed layer, at a rate and a per-micro-step overhead fitted to the probes'
// timings; plus the optimizer step (timed on the largest parameter, scaled by the elements). Candidates whose
// predicted speeds are within kSpeedTie of the fastest are ties, broken by a fixed rule (least recomputation, then
// the largest micro-batch, then the smallest peak), so the same inputs give the same plan on a loaded machine.
//
// Planning is for the worst batch the data can produce after truncation: every row at the longest source and
// target length. On CUDA the caching allocator's rounding and segments are replayed on the predicted tensors
// (cuda_allocator_model.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/Device.h>

#include "fitsum/memory/calibration.h"
#include "fitsum/memory/cuda_allocator_model.h"
#include "fitsum/memory/evaluation_memory.h"
#include "fitsum/memory/static_memory.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/optim/sharding.h"

namespace fitsum::memory {

// ---- The budget (--max_memory) ----

// Free memory of the device: MemAvailable of the kernel on the CPU, free device memory on CUDA. None (0 bytes) is
// no budget to plan in: std::runtime_error, as for a /proc/meminfo without MemAvailable.
std::uint64_t available_memory(const c10::Device& device);
// MemAvailable in bytes, from the text of /proc/meminfo ("MemAvailable:  8054012 kB"); throws std::runtime_error
// when the line is missing, unreadable or 0.
std::uint64_t mem_available_bytes(const std::string& meminfo);
// "auto" or a size such as "6GiB"; throws std::invalid_argument for anything else.
std::uint64_t resolve_memory_budget(const std::string& spec, const c10::Device& device);
// Makes `bytes` a hard limit: the tracking allocator's limit on the CPU (allocations beyond it raise
// c10::OutOfMemoryError), the caching allocator's memory fraction on CUDA. 0 removes the limit.
void apply_memory_budget(const c10::Device& device, std::uint64_t bytes);

// ---- Prediction ----

struct PlanKnobs {
  std::int64_t micro_batch = 1;           // per_device_train_batch_size
  std::int64_t accumulation = 1;          // gradient_accumulation_steps
  std::int64_t encoder_checkpointed = 0;  // the bottom N encoder layers are checkpointed
  std::int64_t decoder_checkpointed = 0;
  optim::OptimizerType optimizer = optim::OptimizerType::adamw_torch;
  bool bf16 = false;
  std::int64_t eval_batch = 0;  // per_device_eval_batch_size, when the run evaluates (0: it does not)
  // Data parallelism: the processes (each with this plan) and the ZeRO stage (1: each keeps the optimizer state of
  // its share of the parameters, optim/sharding.h; the prediction is the process with the largest share).
  int world_size = 1;
  int zero_stage = 0;  // 2: the gradients are sharded too (train/gradient_reducer.h), in buckets of bucket_bytes
  std::int64_t bucket_bytes = optim::kReduceBucketBytes;
  // The optimizer's state and update on the host (--offload_optimizer cpu, train/optimizer_offload.h).
  bool offload_optimizer = false;
  bool checkpointing() const { return encoder_checkpointed > 0 || decoder_checkpointed > 0; }
};

struct Prediction {
  std::uint64_t weights = 0;
  std::uint64_t gradients = 0;
  std::uint64_t optimizer_state = 0;
  std::uint64_t activations = 0;  // the micro-step transient
  std::uint64_t optimizer_transient = 0;
  // What evaluation adds to the weights, gradients and optimizer state at its peak, at the plan's eval batch (0 when
  // the run does not evaluate). The peak covers it: max(training's peak, resident + evaluation).
  std::uint64_t evaluation = 0;
  std::uint64_t peak = 0;
  double step_flops = 0.0;       // matrix-product FLOPs of an optimizer step, recomputation included
  double recompute_flops = 0.0;  // of which recomputation
  double step_seconds = 0.0;
  double tokens_per_second = 0.0;  // at the worst shape: B x (S + T) tokens per row
  // An offloaded optimizer (PlanKnobs::offload_optimizer; then optimizer_state and optimizer_transient above, the
  // device's, are 0): the host's bytes (the optimizer state, the host copies of the weights and gradients, the
  // update's transient), the bytes copied each way in a step (the gradients out, the weights back), and the seconds
  // of those copies and of the host's update, both in step_seconds.
  std::uint64_t host = 0;
  std::uint64_t transfer_bytes = 0;
  double transfer_seconds = 0.0;
  double host_update_seconds = 0.0;
};

// Host <-> device copy rates for an offloaded optimizer's time term: PCIe 4.0 x16 as pinned copies reach it
// (about 25 GB/s each way; PCIe 5 doubles it, so this is the conservative one), and on the CPU build, where the
// device is the host, a memcpy's.
constexpr double kPcieBytesPerSecond = 25e9;
constexpr double kMemcpyBytesPerSecond = 10e9;

// `worst` gives the lengths; its batch is ignored (the knobs' micro-batch is used). `host_device_bytes_per_second`
// times an offloaded optimizer's copies.
Prediction predict(const Calibration& calibration, const PlanKnobs& knobs, const BatchShape& worst,
                   double host_device_bytes_per_second = kMemcpyBytesPerSecond);
// Adds what evaluating `load` at batch `eval_batch` holds beside the weights, gradients and optimizer state to a
// prediction: Prediction::evaluation, and the peak when evaluation's is higher.
void add_evaluation(const model::ModelConfig& config, EvaluationLoad load, std::int64_t eval_batch,
                    Prediction& prediction);

// ---- Choosing ----

// Predictions are within a few percent (tests/model/planner_test.cpp); the margin absorbs the rest.
constexpr double kPlanMargin = 0.05;
// What `bytes` need under a budget with the planner's margin: bytes x (1 + margin), rounded up.
std::uint64_t with_margin(std::uint64_t bytes, double margin);

// Candidates predicted within this fraction of the fastest are equally fast: timing noise must not decide.
constexpr double kSpeedTie = 0.03;

// Whether the optimizer may be offloaded to the host (--offload_optimizer none, cpu or auto).
enum class OffloadPolicy { none, cpu, free };

// How the optimizer is chosen.
enum class OptimizerPolicy {
  fixed,      // the request's optimizer, nothing else (an explicit --optim)
  preferred,  // the request's optimizer whenever some candidate with it fits; another only when none does
  free,       // any (--optim auto): the fastest that fits
};

struct PlanRequest {
  std::int64_t effective_batch = 8;  // per_device_train_batch_size x gradient_accumulation_steps
  std::int64_t source_length = 512;  // the worst batch after truncation
  std::int64_t target_length = 128;
  std::optional<std::int64_t> micro_batch;  // fixed by --no_resplit
  optim::OptimizerType optimizer = optim::OptimizerType::adamw_torch;
  OptimizerPolicy optimizer_policy = OptimizerPolicy::preferred;
  // Fixed by an explicit --gradient_checkpointing[_layers]: checkpointed encoder and decoder layers.
  std::optional<std::pair<std::int64_t, std::int64_t>> checkpointed_layers;
  bool bf16 = false;
  // The processes of a data-parallel run and, when fixed (--zero_stage), the ZeRO stage; unset with several
  // processes, the planner chooses it (stage 1 only where it fits a faster or otherwise no candidate).
  int world_size = 1;
  std::optional<int> zero_stage;
  std::int64_t bucket_bytes = optim::kReduceBucketBytes;  // ZeRO stage 2's (ddp_bucket_cap_mb)
  std::uint64_t budget = 0;
  double margin = kPlanMargin;
  // When set, every candidate's CUDA terms are predicted (Candidate::cuda, cuda_allocator_model.h); with
  // budget_caps_reserved the budget caps their reserved bytes instead of the predicted peak (a CUDA device: the
  // caching allocator's memory fraction caps what it reserves, of which the peak is only a part).
  std::optional<CudaPlanInputs> cuda;
  bool budget_caps_reserved = false;
  // When the run evaluates (eval or predict data): its load at the requested per_device_eval_batch_size. Each
  // candidate gets the largest eval batch up to that one which fits beside its resident memory (evaluation's
  // results do not depend on the batch); a candidate fits only if evaluation of one example does.
  std::optional<EvaluationLoad> evaluation;
  // --offload_optimizer: none (no candidate offloads), cpu (every one does) or auto (both kinds; an offloaded one is
  // chosen only where it is the fastest that fits, and loses ties). An offloaded candidate fits only when its host
  // bytes, with the margin, are within host_budget (--max_host_memory); its copies run at this rate.
  OffloadPolicy offload = OffloadPolicy::none;
  std::uint64_t host_budget = 0;
  double host_device_bytes_per_second = kMemcpyBytesPerSecond;
};

struct Candidate {
  PlanKnobs knobs;
  Prediction prediction;
  std::optional<CudaMemoryTerms> cuda;  // PlanRequest::cuda set: allocated, reserved and the terms between
  bool fits = false;
  bool host_fits = true;  // an offloaded candidate's host bytes within the host budget (fits requires it)
};

struct Plan {
  // Per micro-batch and optimizer: no checkpointing, every layer, and the partial set with the least recomputation
  // that fits (when there is one between).
  std::vector<Candidate> candidates;
  std::optional<std::size_t> chosen;  // index into candidates; empty when none fits
  std::uint64_t minimum_budget = 0;   // the smallest budget under which some candidate fits (with the margin)
  // Set when the policy was `preferred` and no candidate with the preferred optimizer fits, but one with another
  // does: the best candidate with the preferred optimizer (what it would need), for the warning.
  std::optional<Candidate> preferred_optimizer_best;
  std::int64_t encoder_layers = 0;  // the model's depths, for checkpointing labels
  std::int64_t decoder_layers = 0;
  std::string explanation;  // why this one (or why none)
};

Plan choose_plan(const Calibration& calibration, const PlanRequest& request);

// "none", "all", "4 of 16 encoder + 9 of 16 decoder" for the knobs of a model of these depths.
std::string checkpointing_label(const PlanKnobs& knobs, std::int64_t encoder_layers, std::int64_t decoder_layers);

}  // namespace fitsum::memory
