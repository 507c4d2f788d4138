// Implements include/fitsum/memory/fit.h: the order of the planning steps, and the sentences that explain them.
#include "fitsum/memory/fit.h"

#include <algorithm>
#include <sstream>

#include "fitsum/memory/device_memory.h"
#include "fitsum/util/bytes.h"

namespace fitsum::memory {

namespace {

optim::OptimizerType other_optimizer(optim::OptimizerType type) {
  return type == optim::OptimizerType::adamw_torch ? optim::OptimizerType::adafactor
                                                   : optim::OptimizerType::adamw_torch;
}

std::string describe_static(const StaticMemory& fixed) {
  return util::format_bytes(fixed.total()) + " (" + util::format_bytes(fixed.weights) + " weights + " +
         util::format_bytes(fixed.gradients) + " gradients + " + util::format_bytes(fixed.optimizer_state) +
         " optimizer state)";
}

model::ParameterCounts request_counts(const model::ModelConfig& config, bool freeze_embeds) {
  return freeze_embeds ? counts_with_frozen_embeddings(config) : model::count_parameters(config);
}

// "; --freeze_embeds ... needs about N" when freezing the embeddings would make Adafactor's static memory fit and
// they are not frozen yet.
std::string freeze_hint(const model::ModelConfig& config, const FitRequest& request) {
  if (request.freeze_embeds) return "";
  const auto frozen = counts_with_frozen_embeddings(config);
  const auto adafactor = static_training_memory(frozen, optim::OptimizerType::adafactor, StorageDtype::fp32);
  const auto needs = with_margin(adafactor.total(), request.margin);
  if (needs > request.budget) return "";
  return "; --freeze_embeds (HF's legacy seq2seq recipe: the shared embedding and the tied LM head stop training) "
         "with optim adafactor needs about " +
         util::format_bytes(needs);
}

FitResult refused(const model::ModelConfig& config, const FitRequest& request) {
  FitResult r;
  r.worst = request.worst;
  r.evaluation = request.evaluation;
  r.budget = request.budget;
  r.layers = std::max(config.encoder_layers, config.decoder_layers);
  r.status = FitStatus::nothing_fits;
  return r;
}

// With adapters, before the probe's copy says what they add: the frozen base's weights (every element at 2 bytes
// with a bfloat16 base, fewer than it holds: its embeddings and norms stay float32) are less than any plan holds.
std::optional<FitResult> check_lora_static_memory(const model::ModelConfig& config, const FitRequest& request) {
  const auto elements = static_cast<std::uint64_t>(model::count_parameters(config).total());
  const auto base = elements * (request.base_bfloat16 ? 2 : 4);
  if (with_margin(base, request.margin) <= request.budget) return std::nullopt;
  auto r = refused(config, request);
  r.minimum_budget = with_margin(base, request.margin);
  r.explanation = "max_memory " + util::format_bytes(request.budget) + " is too small for LoRA on this model: its " +
                  "frozen base's weights alone need at least " + util::format_bytes(base) +
                  (request.base_bfloat16 ? " in bfloat16" : "") + ", " + util::format_bytes(r.minimum_budget) +
                  " with the planner's margin" +
                  (request.base_bfloat16 ? "" : "; --base_dtype bfloat16 holds its Linear weights in half the bytes");
  return r;
}

}  // namespace

std::optional<FitResult> check_static_memory(const model::ModelConfig& config, const FitRequest& request) {
  if (request.budget == 0) throw std::invalid_argument("max_memory must be above 0");
  if (request.lora.enabled()) return check_lora_static_memory(config, request);
  const auto counts = request_counts(config, request.freeze_embeds);
  // Per process: with several processes, the optimizer state of the largest share unless stage 0 is fixed, and the
  // gradients' share unless stage 0 or 1 is.
  const int stage = request.world_size > 1 ? request.zero_stage.value_or(2) : 0;
  const auto needs = [&](optim::OptimizerType type) {
    auto m = static_training_memory(counts, type, StorageDtype::fp32);
    m.optimizer_state = sharded_optimizer_state(counts, type, StorageDtype::fp32, stage >= 1 ? request.world_size : 1);
    if (stage >= 2) m.gradients = sharded_gradients(counts, request.world_size, request.bucket_bytes);
    if (request.offload != OffloadPolicy::none) m.optimizer_state = 0;  // it may live on the host
    return m;
  };
  FitResult r;
  r.worst = request.worst;
  r.evaluation = request.evaluation;
  r.budget = request.budget;
  r.layers = std::max(config.encoder_layers, config.decoder_layers);
  std::ostringstream why;
  if (request.optimizer_policy == OptimizerPolicy::fixed) {
    const auto fixed = needs(request.optimizer);
    if (with_margin(fixed.total(), request.margin) <= request.budget) return std::nullopt;
    const auto other = other_optimizer(request.optimizer);
    const auto alternative = needs(other);
    why << "max_memory " << util::format_bytes(request.budget) << " is too small for optim "
        << optim::to_string(request.optimizer) << ": its weights, gradients and optimizer state alone need "
        << describe_static(fixed) << ", at least " << util::format_bytes(with_margin(fixed.total(), request.margin))
        << " with the planner's margin, before any activation";
    if (with_margin(alternative.total(), request.margin) < request.budget) {
      r.status = FitStatus::settings_too_large;
      why << ". A plan that fits starts from optim " << optim::to_string(other) << " ("
          << util::format_bytes(alternative.total()) << " before activations): set optim " << optim::to_string(other)
          << " (or auto, and the planner chooses), or run `fitsum plan` with these arguments for the table";
    } else {
      r.status = FitStatus::nothing_fits;
      why << freeze_hint(config, request);
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
        << ", at least " << util::format_bytes(r.minimum_budget) << " with the planner's margin, before any activation"
        << freeze_hint(config, request);
  }
  r.explanation = why.str();
  return r;
}

namespace {

// The model as the CUDA allocator model needs it: trainable parameter shapes, the other weights' sizes, the
// device's facts.
CudaPlanInputs cuda_plan_inputs(model::Seq2SeqLMImpl& model, const FitRequest& request, const c10::Device& device) {
  CudaPlanInputs cuda;
  const auto bytes = [](const torch::Tensor& t) { return static_cast<std::uint64_t>(t.numel() * t.element_size()); };
  for (const auto& p : model.parameters()) {  // a frozen parameter is a weight without gradient or state
    if (p.requires_grad()) {
      cuda.model.parameter_shapes.push_back(p.sizes().vec());
    } else {
      cuda.model.buffer_bytes.push_back(bytes(p));
    }
  }
  for (const auto& b : model.buffers()) cuda.model.buffer_bytes.push_back(bytes(b));
  cuda.model.d_model = model.config().d_model;
  cuda.conf = request.cuda_alloc_conf.value_or(util::CudaAllocConf{});
  cuda.device = cuda_device_facts(device);
  return cuda;
}

// On CUDA, or when allocator settings are given, the CUDA model needs the parameters' shapes.
bool needs_cuda_inputs(const c10::Device& device, const std::optional<util::CudaAllocConf>& cuda_alloc_conf) {
  return device.is_cuda() || cuda_alloc_conf.has_value();
}

bool needs_cuda_inputs(const c10::Device& device, const FitRequest& request) {
  return request.for_cuda_device || needs_cuda_inputs(device, request.cuda_alloc_conf);
}

// The planner's request, with the CUDA model's inputs when there are any.
PlanRequest plan_request(const FitRequest& request, const c10::Device& device, std::optional<CudaPlanInputs> cuda) {
  PlanRequest p;
  if (cuda) {
    p.cuda = std::move(cuda);
    p.budget_caps_reserved = device.is_cuda() || request.for_cuda_device;
  }
  p.effective_batch = request.effective_batch;
  p.source_length = request.worst.source;
  p.target_length = request.worst.target;
  p.micro_batch = request.micro_batch;
  p.optimizer = request.optimizer;
  p.optimizer_policy = request.optimizer_policy;
  p.checkpointed_layers = request.checkpointed_layers;
  p.bf16 = request.bf16;
  p.world_size = request.world_size;
  p.zero_stage = request.zero_stage;
  p.bucket_bytes = request.bucket_bytes;
  p.budget = request.budget;
  p.margin = request.margin;
  p.evaluation = request.evaluation;
  p.offload = request.offload;
  if (p.offload != OffloadPolicy::none) {
    p.host_budget = request.host_budget > 0 ? request.host_budget : available_memory(torch::kCPU);
    p.host_device_bytes_per_second =
        device.is_cuda() || request.for_cuda_device ? kPcieBytesPerSecond : kMemcpyBytesPerSecond;
  }
  return p;
}

// Step 4: nothing fits the request. With every knob free, is there a plan that does?
void explain_no_fit(FitResult& r, const FitRequest& request, const PlanRequest& planned) {
  auto relaxed = planned;
  relaxed.micro_batch.reset();
  relaxed.optimizer_policy = OptimizerPolicy::free;
  relaxed.checkpointed_layers.reset();
  relaxed.zero_stage.reset();
  const auto free = choose_plan(*r.calibration, relaxed);
  const bool something_fixed = request.micro_batch || request.optimizer_policy == OptimizerPolicy::fixed ||
                               request.checkpointed_layers || (request.world_size > 1 && request.zero_stage);
  std::ostringstream why;
  why << "max_memory " << util::format_bytes(request.budget)
      << " is too small for these settings: " << r.plan.explanation;
  if (free.chosen && something_fixed) {
    r.status = FitStatus::settings_too_large;
    r.alternative = free.candidates[*free.chosen];
    why << ". A plan that fits: " << plan_arguments(r.alternative->knobs, *r.calibration) << " (predicted peak "
        << util::format_bytes(r.alternative->prediction.peak)
        << "); leave gradient_checkpointing unset and set optim auto to let the planner choose";
  } else {
    r.status = FitStatus::nothing_fits;
    why << ". Even micro-batch 1 with full checkpointing and adafactor needs "
        << util::format_bytes(free.minimum_budget);
    if (!request.freeze_embeds && !request.lora.enabled()) {
      // The same plan without the embedding's gradient and state (its activations are not smaller).
      const auto& c = *r.calibration;
      const auto frozen = counts_with_frozen_embeddings(c.config);
      const auto saved = c.counts.trainable - frozen.trainable;
      if (saved > 0) {
        const auto adafactor_now = static_training_memory(c.counts, optim::OptimizerType::adafactor, StorageDtype::fp32);
        const auto adafactor_frozen = static_training_memory(frozen, optim::OptimizerType::adafactor, StorageDtype::fp32);
        const auto less = (adafactor_now.gradients + adafactor_now.optimizer_state) -
                          (adafactor_frozen.gradients + adafactor_frozen.optimizer_state);
        const auto needs = free.minimum_budget > less ? free.minimum_budget - with_margin(less, 0.0) : 0;
        if (needs <= request.budget) {
          why << "; with --freeze_embeds (the shared embedding and the tied LM head stop training, HF's legacy seq2seq "
                 "recipe) about "
              << util::format_bytes(needs) << " would do";
        }
      }
    }
  }
  r.minimum_budget = std::min(r.plan.minimum_budget, free.minimum_budget);
  r.explanation = why.str();
}

std::string evaluation_warning(const FitRequest& request, const Candidate& chosen, const model::ModelConfig& config) {
  if (!request.evaluation || chosen.knobs.eval_batch >= request.evaluation->batch) return "";
  const auto& load = *request.evaluation;
  const auto& p = chosen.prediction;
  std::ostringstream out;
  out << "per_device_eval_batch_size " << load.batch << " does not fit beside training's "
      << util::format_bytes(p.weights + p.gradients + p.optimizer_state) << " of weights, gradients and optimizer state: "
      << "evaluating " << load.batch << " examples";
  if (load.generate) out << " with " << load.num_beams << " beam" << (load.num_beams == 1 ? "" : "s") << " up to "
                         << load.max_length << " tokens";
  out << " needs " << util::format_bytes(predict_evaluation(config, load).peak())
      << " more; using per_device_eval_batch_size " << chosen.knobs.eval_batch << " ("
      << util::format_bytes(p.evaluation) << "); the generated summaries and ROUGE do not depend on it, eval_loss (HF's mean of the batches' means) may "
         "shift slightly. Set a smaller per_device_eval_batch_size to silence this";
  return out.str();
}

FitResult fit(const model::ModelConfig& config, const c10::Device& device, const FitRequest& request,
              std::optional<CudaPlanInputs> cuda);

// Step 5: full fine-tuning cannot fit; the first LoRA configuration of the ladder that does, planned with the knobs
// the user fixed, is named in the explanation (with its predicted peak), or the cheapest one's need when none fits.
// On CUDA the configurations are planned by their predicted peak (the allocator model needs a model's shapes).
void suggest_lora(FitResult& r, const model::ModelConfig& config, const c10::Device& device,
                  const FitRequest& request) {
  if (!request.suggest_lora || request.lora.enabled() || r.status != FitStatus::nothing_fits) return;
  std::optional<std::pair<LoraRung, std::uint64_t>> cheapest;  // when none fits: the one that needs the least
  for (const auto& rung : lora_suggestion_ladder()) {
    auto lora = request;
    lora.lora = rung.lora;
    lora.base_bfloat16 = rung.base_bfloat16;
    lora.suggest_lora = false;
    lora.freeze_embeds = false;  // adapters freeze the embeddings anyway
    lora.for_cuda_device = false;
    lora.cuda_alloc_conf.reset();
    auto result = check_static_memory(config, lora);
    if (!result) result = fit(config, device, lora, std::nullopt);
    const auto& plan = result->chosen ? result->chosen : result->alternative;
    if (plan && result->calibration) {
      r.lora_suggestion = LoraSuggestion{rung, *plan, lora_arguments(rung.lora, rung.base_bfloat16)};
      std::ostringstream why;
      why << ". Full fine-tuning needs " << (r.calibration ? "" : "at least ") << util::format_bytes(r.minimum_budget)
          << "; " << r.lora_suggestion->arguments << " fits in " << util::format_bytes(plan->prediction.peak)
          << " (predicted peak, with " << plan_arguments(plan->knobs, *result->calibration)
          << "). LoRA trains low-rank adapters instead of the model's weights, so the planner does not switch to it "
             "by itself";
      r.explanation += why.str();
      return;
    }
    if (!cheapest || result->minimum_budget < cheapest->second) cheapest = {rung, result->minimum_budget};
  }
  r.explanation += ". No LoRA configuration fits either: the cheapest tried, " +
                   lora_arguments(cheapest->first.lora, cheapest->first.base_bfloat16) + ", needs " +
                   util::format_bytes(cheapest->second);
}

// Steps 2 to 4 (fit.h), from the config and the device; `cuda` holds the CUDA model's inputs when it is needed.
FitResult fit(const model::ModelConfig& config, const c10::Device& device, const FitRequest& request,
              std::optional<CudaPlanInputs> cuda) {
  CalibrationOptions options;
  options.max_source_length = request.worst.source;
  options.max_target_length = request.worst.target;
  options.bf16 = request.bf16;
  options.label_smoothing = request.label_smoothing;
  options.freeze_embeds = request.freeze_embeds;
  options.lora = request.lora;
  options.base_bfloat16 = request.base_bfloat16;
  FitResult r;
  r.worst = request.worst;
  r.evaluation = request.evaluation;
  r.budget = request.budget;
  const auto probe = [&] { return calibrate(config, device, options); };
  if (request.share_calibration) {
    r.calibration = request.share_calibration(
        probe, [&](const std::vector<double>& numbers) { return calibration_from_numbers(config, options, numbers); });
  } else {
    r.calibration = probe();
  }
  r.layers = std::max(r.calibration->encoder_layers, r.calibration->decoder_layers);
  const auto planned = plan_request(request, device, std::move(cuda));
  r.plan = choose_plan(*r.calibration, planned);
  if (planned.cuda) r.cuda_alloc_conf = planned.cuda->conf;
  r.budget_caps_reserved = planned.budget_caps_reserved;
  r.cuda_plan_from_cpu = planned.cuda.has_value() && !device.is_cuda();
  if (r.plan.chosen) {
    r.status = FitStatus::fits;
    r.chosen = r.plan.candidates[*r.plan.chosen];
    r.minimum_budget = r.plan.minimum_budget;
    r.explanation = r.plan.explanation;
    if (r.plan.preferred_optimizer_best && r.chosen->knobs.optimizer != request.optimizer) {
      const auto& best = *r.plan.preferred_optimizer_best;
      std::ostringstream warning;
      warning << "optim " << optim::to_string(request.optimizer) << " (the default) does not fit in "
              << util::format_bytes(request.budget) << ": its smallest plan ("
              << plan_arguments(best.knobs, *r.calibration) << ") needs "
              << util::format_bytes(with_margin(best.prediction.peak, request.margin)) << " with the margin; using optim "
              << optim::to_string(r.chosen->knobs.optimizer) << " (predicted peak "
              << util::format_bytes(r.chosen->prediction.peak)
              << "). The learning rate stays as given, though it was meant for "
              << optim::to_string(request.optimizer)
              << ": set optim (and learning_rate) explicitly to silence this, or optim auto to let the planner choose";
      r.optimizer_warning = warning.str();
    }
    r.evaluation_warning = evaluation_warning(request, *r.chosen, r.calibration->config);
    return r;
  }
  explain_no_fit(r, request, planned);
  suggest_lora(r, config, device, request);
  return r;
}

}  // namespace

std::optional<FitResult> refusal_before_loading(const model::ModelConfig& config, const c10::Device& device,
                                                const FitRequest& request) {
  auto refused = check_static_memory(config, request);
  if (refused) suggest_lora(*refused, config, device, request);
  return refused;
}

FitResult fit_training(model::Seq2SeqLMImpl& model, const FitRequest& request) {
  const auto device = model.parameters().front().device();
  if (auto refused = refusal_before_loading(model.config(), device, request)) return *refused;
  std::optional<CudaPlanInputs> cuda;
  if (needs_cuda_inputs(device, request)) cuda = cuda_plan_inputs(model, request, device);
  return fit(model.config(), device, request, std::move(cuda));
}

bool can_fit_without_weights(const c10::Device& device, const std::optional<util::CudaAllocConf>& cuda_alloc_conf) {
  return !needs_cuda_inputs(device, cuda_alloc_conf);
}

FitResult fit_training(const model::ModelConfig& config, const c10::Device& device, const FitRequest& request) {
  if (needs_cuda_inputs(device, request)) {
    throw std::invalid_argument("fit_training without a model: the CUDA allocator model needs the parameters' shapes");
  }
  if (auto refused = refusal_before_loading(config, device, request)) return *refused;
  return fit(config, device, request, std::nullopt);
}

PlanDoesNotFit::PlanDoesNotFit(FitResult result) : std::runtime_error(result.explanation), result_(std::move(result)) {}

std::string plan_arguments(const PlanKnobs& knobs, const Calibration& c) {
  std::ostringstream out;
  out << "--per_device_train_batch_size " << knobs.micro_batch << " --gradient_accumulation_steps "
      << knobs.accumulation;
  const auto ce = std::min(knobs.encoder_checkpointed, c.encoder_layers);
  const auto cd = std::min(knobs.decoder_checkpointed, c.decoder_layers);
  if (ce > 0 || cd > 0) out << " --gradient_checkpointing";
  if ((ce > 0 || cd > 0) && !(ce == c.encoder_layers && cd == c.decoder_layers)) {
    out << " --gradient_checkpointing_encoder_layers " << ce << " --gradient_checkpointing_decoder_layers " << cd;
  }
  out << " --optim " << optim::to_string(knobs.optimizer);
  if (knobs.bf16) out << " --bf16";
  if (knobs.offload_optimizer) out << " --offload_optimizer cpu";
  if (knobs.world_size > 1 && knobs.zero_stage > 0) out << " --zero_stage " << knobs.zero_stage;
  if (c.lora.enabled()) {
    out << " " << lora_arguments(c.lora, c.base_bfloat16);
  } else if (c.freeze_embeds) {
    out << " --freeze_embeds";
  }
  if (knobs.eval_batch > 0) out << " --per_device_eval_batch_size " << knobs.eval_batch;
  return out.str();
}

}  // namespace fitsum::memory
