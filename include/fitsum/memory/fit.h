// fitsum's promise as one library call: given a model, the shape of the data and what the user fixed, find the
// fastest training configuration that fits a memory budget (memory/planner.h does the predicting), or say why none
// does and what would. `fitsum train --max_memory`, `fitsum plan` and `fitsum bench train --max_memory` call it and
// only format its result.
//
// The steps, in order:
//   1. Static memory first, from the config, before any probe or weight load (check_static_memory): when the
//      weights, gradients and state of the optimizer the user fixed (or of the cheapest one, when it is not fixed)
//      exceed the budget, the answer comes in milliseconds, naming what would fit (another optimizer,
//      --freeze_embeds).
//   2. The calibration probe on reduced-depth copies of the model (memory::calibrate), under the runtime the run
//      will use.
//   3. Every candidate that keeps the effective batch and the fixed knobs, predicted and ranked (memory::choose_plan).
//   4. When none fits, the same with every knob free: "a plan that fits", or the smallest budget anything needs.
//   5. When full fine-tuning cannot fit at all, the LoRA configurations of lora_suggestion_ladder() are planned in
//      turn (with the knobs the user fixed) and the first that fits is named with its predicted peak. The planner
//      never trains adapters by itself: they change what is learned.
// On a CUDA device the budget is the caching allocator's memory fraction, which caps what it *reserves*: every
// candidate's reserved bytes are predicted (cuda_allocator_model.h) and the budget caps those instead of the peak.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fitsum/memory/lora_memory.h"
#include "fitsum/memory/planner.h"
#include "fitsum/util/cuda_alloc_conf.h"

namespace fitsum::memory {

// What the caller fixes; every knob left empty the planner chooses.
struct FitRequest {
  std::uint64_t budget = 0;          // bytes the run may hold at its peak (weights included)
  BatchShape worst;                  // the longest source and target after truncation; its batch is ignored
  std::int64_t effective_batch = 8;  // per_device_train_batch_size x gradient_accumulation_steps, always kept
  std::optional<std::int64_t> micro_batch;
  // The optimizer and how the planner may treat it: `fixed` for an explicit --optim, `preferred` when --optim is
  // unset (HF's default adamw_torch, changed only when no AdamW plan fits, with a warning), `free` for --optim auto.
  optim::OptimizerType optimizer = optim::OptimizerType::adamw_torch;
  OptimizerPolicy optimizer_policy = OptimizerPolicy::preferred;
  std::optional<std::pair<std::int64_t, std::int64_t>> checkpointed_layers;  // encoder, decoder; >= depth means all
  bool bf16 = false;
  // A data-parallel run: its processes (each planned alike, for its own device) and the ZeRO stage when fixed.
  int world_size = 1;
  std::optional<int> zero_stage;
  std::int64_t bucket_bytes = optim::kReduceBucketBytes;  // ZeRO stage 2's (ddp_bucket_cap_mb)
  // --offload_optimizer (none, cpu, auto: the planner's choice) and --max_host_memory (0: the machine's available
  // memory), which an offloaded optimizer's host bytes must fit (PlanRequest::offload).
  OffloadPolicy offload = OffloadPolicy::none;
  std::uint64_t host_budget = 0;
  bool freeze_embeds = false;  // --freeze_embeds: the shared embedding and the tied LM head are not trained
  // Low-rank adapters (r 0: full fine-tuning) and --base_dtype bfloat16 for their frozen base (lora_memory.h).
  model::LoraConfig lora;
  bool base_bfloat16 = false;
  // Whether a refusal of full fine-tuning plans the LoRA ladder (step 5) to name a configuration that fits.
  bool suggest_lora = true;
  double label_smoothing = 0.0;
  double margin = kPlanMargin;
  // The CUDA caching allocator's settings the run uses (util::Runtime::cuda_alloc_conf). On a CUDA model the
  // reserved bytes are predicted under them (its defaults when empty); on the CPU, when set, the plan reports what
  // a CUDA device (an H100 / H200) would reserve, and the budget still caps the peak.
  std::optional<util::CudaAllocConf> cuda_alloc_conf;
  // The plan is for a CUDA device (an H100 / H200) that this machine does not have (`fitsum plan --device cuda`
  // without CUDA): the CUDA terms are predicted and the budget caps the reserved bytes as on CUDA, while the probe,
  // and so every speed, runs on this machine's CPU.
  bool for_cuda_device = false;
  // Set when the run evaluates: per_device_eval_batch_size, the eval data's lengths and the decoding options.
  std::optional<EvaluationLoad> evaluation;
  // Where given, replaces running the calibration probe (the processes of a data-parallel job plan with one
  // process's probe): called with the probe and what rebuilds a calibration from another's calibration_numbers.
  std::function<Calibration(const std::function<Calibration()>& probe,
                            const std::function<Calibration(const std::vector<double>&)>& from_numbers)>
      share_calibration;
};

enum class FitStatus {
  fits,                // `chosen` is the fastest candidate under the budget
  settings_too_large,  // what the user fixed cannot fit; `alternative` fits when the planner may choose
  nothing_fits,        // not even the cheapest candidate fits; `minimum_budget` says what it needs
};

// Step 5's answer: the first LoRA configuration of the ladder that fits, and its plan.
struct LoraSuggestion {
  LoraRung rung;
  Candidate plan;
  std::string arguments;  // lora_arguments(): the flags to add
};

struct FitResult {
  FitStatus status = FitStatus::nothing_fits;
  std::optional<Calibration> calibration;  // absent when step 1 refused without a probe
  Plan plan;                               // the candidates under the request (empty without a probe)
  std::optional<Candidate> chosen;         // status == fits
  std::optional<Candidate> alternative;    // status == settings_too_large: the planner's own choice that fits
  std::uint64_t minimum_budget = 0;        // the smallest budget under which the request's best candidate fits
  std::uint64_t budget = 0;                // the request's budget
  BatchShape worst;                        // the request's worst batch (lengths planned for)
  std::optional<EvaluationLoad> evaluation;  // the request's, when the run evaluates
  std::int64_t layers = 0;                 // the deeper stack's layer count (checkpointing labels)
  std::string explanation;                 // why this plan, or why none, in one paragraph
  // Set when the optimizer was `preferred` and the plan uses another: the numbers, for a warning.
  std::string optimizer_warning;
  // Set when the chosen plan evaluates with a smaller per_device_eval_batch_size than requested: the numbers.
  std::string evaluation_warning;
  // The allocator settings the candidates' CUDA terms (Candidate::cuda) were predicted under; empty without them.
  std::optional<util::CudaAllocConf> cuda_alloc_conf;
  bool budget_caps_reserved = false;  // on CUDA: `budget` capped each candidate's predicted reserved bytes
  // The candidates' CUDA terms are for a CUDA device while the probe ran on the CPU: the speeds are the CPU's.
  bool cuda_plan_from_cpu = false;
  // Full fine-tuning does not fit (status nothing_fits): the LoRA configuration that would, when one does.
  std::optional<LoraSuggestion> lora_suggestion;
};

// Step 1 alone, from the config: weights, gradients and optimizer state against the budget, before any weight is
// loaded. Returns a result (never `fits`) when they alone exceed it; nothing otherwise.
std::optional<FitResult> check_static_memory(const model::ModelConfig& config, const FitRequest& request);

// Runs the steps above on `model` (on its device). The model's weights stay as they are; gradients are left
// allocated and zero; the random stream is unchanged.
FitResult fit_training(model::Seq2SeqLMImpl& model, const FitRequest& request);

// The same without the model's weights, from its config, where nothing else is needed: on the CPU without CUDA
// allocator settings (the probe builds its own reduced-depth copies). `fitsum plan` then neither loads nor
// initialises the model (2.3 GB for pegasus-large). Throws std::invalid_argument where the model is needed.
bool can_fit_without_weights(const c10::Device& device, const std::optional<util::CudaAllocConf>& cuda_alloc_conf);
FitResult fit_training(const model::ModelConfig& config, const c10::Device& device, const FitRequest& request);

// Thrown by callers that cannot go on without a plan (fitsum train): carries the result for the message and the
// table; the CLI exits with status 3.
class PlanDoesNotFit : public std::runtime_error {
 public:
  explicit PlanDoesNotFit(FitResult result);
  const FitResult& result() const { return result_; }

 private:
  FitResult result_;
};

// Steps 1 and 5 before the model is loaded: check_static_memory, and when it refuses full fine-tuning, the LoRA
// suggestion (which runs the calibration probe of each configuration it tries on `device`).
std::optional<FitResult> refusal_before_loading(const model::ModelConfig& config, const c10::Device& device,
                                                const FitRequest& request);

// "--per_device_train_batch_size 4 --gradient_accumulation_steps 2 --gradient_checkpointing --optim adafactor":
// the TrainingArguments that select `knobs`, in their command-line spelling (with the LoRA flags of a LoRA plan).
std::string plan_arguments(const PlanKnobs& knobs, const Calibration& calibration);

}  // namespace fitsum::memory
