// Implements include/fitsum/memory/planner.h: the budget, prediction and the choice of a plan (the probe is
// calibration.cpp).
#include "fitsum/memory/planner.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/optim/sharding.h"
#include "fitsum/util/bytes.h"

#ifdef FITSUM_WITH_CUDA
#include <cuda_runtime_api.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace fitsum::memory {

// ---- The budget ----

std::uint64_t mem_available_bytes(const std::string& meminfo) {
  std::istringstream lines(meminfo);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    std::uint64_t kib = 0;
    std::string unit;
    if (!(fields >> kib >> unit) || unit != "kB" || kib > std::numeric_limits<std::uint64_t>::max() / 1024) {
      throw std::runtime_error("max_memory auto: cannot read '" + line + "' in /proc/meminfo; give a size instead");
    }
    if (kib == 0) {
      throw std::runtime_error(
          "max_memory auto: the kernel reports no available memory (MemAvailable: 0 kB in /proc/meminfo), so "
          "there is no budget to plan in; give a size instead, e.g. --max_memory 6GiB");
    }
    return kib * 1024;
  }
  throw std::runtime_error("max_memory auto: MemAvailable not found in /proc/meminfo; give a size instead");
}

std::uint64_t available_memory(const c10::Device& device) {
#ifdef FITSUM_WITH_CUDA
  if (device.is_cuda()) {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      throw std::runtime_error("max_memory auto: cudaMemGetInfo failed");
    }
    if (free_bytes == 0) {
      throw std::runtime_error("max_memory auto: the device reports no free memory; give a size instead");
    }
    return free_bytes;
  }
#endif
  std::ifstream file("/proc/meminfo");
  const std::string meminfo((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return mem_available_bytes(meminfo);
}

std::uint64_t resolve_memory_budget(const std::string& spec, const c10::Device& device) {
  if (spec == "auto") return available_memory(device);
  const auto bytes = util::parse_bytes(spec);
  if (bytes == 0) throw std::invalid_argument("max_memory must be above 0 (or 'auto')");
  return bytes;
}

void apply_memory_budget(const c10::Device& device, std::uint64_t bytes) {
#ifdef FITSUM_WITH_CUDA
  if (device.is_cuda()) {
    // The fraction is of the whole device; what the CUDA context already holds is outside the caching allocator.
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess || total_bytes == 0) {
      throw std::runtime_error("max_memory: cudaMemGetInfo failed");
    }
    const double fraction =
        bytes == 0 ? 1.0 : std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total_bytes));
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device.index() < 0 ? 0 : device.index());
    return;
  }
#endif
  TrackingCpuAllocator::instance().set_limit(static_cast<std::int64_t>(bytes));
}

// ---- Prediction ----

namespace {

// An offloaded optimizer's terms: its state, its update's transient and the copies go to the host; its update and
// the copies each way add to the step.
void offload_terms(const Calibration& c, const PlanKnobs& knobs, double bytes_per_second, Prediction& p) {
  p.transfer_bytes = p.gradients;
  p.host = p.optimizer_state + p.optimizer_transient + 2 * p.transfer_bytes;
  p.optimizer_state = 0;
  p.optimizer_transient = 0;
  p.transfer_seconds = 2.0 * static_cast<double>(p.transfer_bytes) / bytes_per_second;
  p.host_update_seconds = c.optimizer(knobs.optimizer).seconds;
}

}  // namespace

Prediction predict(const Calibration& c, const PlanKnobs& knobs, const BatchShape& worst,
                   double host_device_bytes_per_second) {
  const BatchShape shape{knobs.micro_batch, worst.source, worst.target};
  const auto ce = std::clamp<std::int64_t>(knobs.encoder_checkpointed, 0, c.encoder_layers);
  const auto cd = std::clamp<std::int64_t>(knobs.decoder_checkpointed, 0, c.decoder_layers);
  Prediction p;
  p.weights = c.weight_bytes;
  const bool stage_two = knobs.zero_stage >= 2 && knobs.world_size > 1;
  const auto sharded = optim::sharded_gradients_of(tensor_elements(c.counts), knobs.world_size, knobs.bucket_bytes);
  p.gradients = stage_two ? sharded.share : c.gradient_bytes;
  p.optimizer_state = sharded_optimizer_state(c.counts, knobs.optimizer, StorageDtype::fp32,
                                              knobs.zero_stage >= 1 ? knobs.world_size : 1);
  // The fits describe the loss head keeping the logits; a shape past its limit runs chunked (LossHeadModes): without
  // the kept gradient, with one chunk of logits in the decoder's phases.
  const auto head = loss_head_modes(c.config, shape);
  // The layer model's encoder layers are units of c.encoder_unit (calibration.h encoder_layer_unit), at the shape
  // its fits are in.
  const auto unit = std::max<std::int64_t>(1, c.encoder_unit);
  const auto units = c.encoder_layers / unit, checkpointed_units = ce / unit;
  const auto fitted = fitted_shape(c.config, shape);
  const double activations =
      head.chunked ? c.memory.transient(fitted, units, c.decoder_layers, checkpointed_units, cd, head.chunk - head.kept,
                                        -head.kept)
                   : c.memory.transient(fitted, units, c.decoder_layers, checkpointed_units, cd);
  p.activations = static_cast<std::uint64_t>(std::llround(activations));
  // Stage 2's gradients outside the share exist only in the backward, as the activations are freed: a transient.
  if (stage_two) p.activations = std::max(p.activations, sharded.in_flight + sharded.packed);
  p.optimizer_transient = c.optimizer(knobs.optimizer).transient_bytes;
  if (knobs.zero_stage >= 1 && knobs.world_size > 1) {  // the broadcast bucket of the updated small tensors
    p.optimizer_transient =
        std::max(p.optimizer_transient, optim::largest_broadcast_bucket(tensor_elements(c.counts), knobs.world_size));
  }
  if (knobs.offload_optimizer) offload_terms(c, knobs, host_device_bytes_per_second, p);
  p.peak = p.weights + p.gradients + p.optimizer_state + std::max(p.activations, p.optimizer_transient);
  double recompute = 0.0;
  const double micro_flops = micro_step_flops(c.config, shape, ce, cd, &recompute, c.lora.enabled());
  const auto accumulation = static_cast<double>(knobs.accumulation);
  p.step_flops = accumulation * micro_flops;
  p.recompute_flops = accumulation * recompute;
  p.step_seconds =
      accumulation * c.speed.seconds(micro_flops) + c.optimizer(knobs.optimizer).seconds + p.transfer_seconds;
  const double tokens =
      static_cast<double>(knobs.micro_batch * knobs.accumulation) * static_cast<double>(worst.source + worst.target);
  p.tokens_per_second = p.step_seconds > 0 ? tokens / p.step_seconds : 0.0;
  return p;
}

// ---- Choosing ----

void add_evaluation(const model::ModelConfig& config, EvaluationLoad load, std::int64_t eval_batch,
                    Prediction& prediction) {
  load.batch = eval_batch;
  prediction.evaluation = predict_evaluation(config, load).peak();
  prediction.peak = std::max(
      prediction.peak, prediction.weights + prediction.gradients + prediction.optimizer_state + prediction.evaluation);
}

std::uint64_t with_margin(std::uint64_t bytes, double margin) {
  return static_cast<std::uint64_t>(std::ceil(static_cast<double>(bytes) * (1.0 + margin)));
}

std::string checkpointing_label(const PlanKnobs& k, std::int64_t encoder_layers, std::int64_t decoder_layers) {
  const auto ce = std::clamp<std::int64_t>(k.encoder_checkpointed, 0, encoder_layers);
  const auto cd = std::clamp<std::int64_t>(k.decoder_checkpointed, 0, decoder_layers);
  if (ce == 0 && cd == 0) return "none";
  if (ce == encoder_layers && cd == decoder_layers) return "all";
  return std::to_string(ce) + "/" + std::to_string(encoder_layers) + " enc + " + std::to_string(cd) + "/" +
         std::to_string(decoder_layers) + " dec";
}

namespace {

// What the budget caps for a candidate: its predicted peak, or on CUDA the allocator model's reserved bytes.
std::uint64_t budgeted_bytes(const Candidate& k, const PlanRequest& request) {
  const auto& p = k.prediction;
  if (!(request.budget_caps_reserved && k.cuda)) return p.peak;
  // Evaluation's tensors are not replayed through the allocator model: its allocated bytes stand for its reserve.
  return std::max(k.cuda->reserved, p.evaluation == 0 ? 0 : p.weights + p.gradients + p.optimizer_state + p.evaluation);
}

// The largest eval batch (up to the requested one) that fits beside the candidate's resident memory, and what
// evaluation adds at it; with none that fits, one example's (the candidate then does not fit).
void add_planned_evaluation(const Calibration& c, const PlanRequest& request, Candidate& candidate) {
  if (!request.evaluation) return;
  auto& p = candidate.prediction;
  const auto resident = p.weights + p.gradients + p.optimizer_state;
  const auto usable =
      static_cast<std::uint64_t>(std::floor(static_cast<double>(request.budget) / (1.0 + request.margin)));
  auto load = *request.evaluation;
  const auto batch = usable > resident ? largest_evaluation_batch(c.config, load, usable - resident) : 0;
  candidate.knobs.eval_batch = std::max<std::int64_t>(1, batch);
  memory::add_evaluation(c.config, load, candidate.knobs.eval_batch, p);
}

std::uint64_t needed_bytes(const Candidate& k, const PlanRequest& request) {
  return with_margin(budgeted_bytes(k, request), request.margin);
}

// The CUDA allocator model's terms of a candidate; an offloaded optimizer keeps no state on the device.
CudaMemoryTerms candidate_cuda_terms(const CudaPlanInputs& inputs, const PlanKnobs& knobs, std::int64_t source,
                                     std::uint64_t transient) {
  if (!knobs.offload_optimizer) {
    return predict_cuda_memory(inputs, knobs.optimizer, knobs.micro_batch, source, transient);
  }
  const auto block = static_cast<std::uint64_t>(knobs.micro_batch * source * inputs.model.d_model) * 4;
  auto tensors =
      training_tensors(inputs.model.parameter_shapes, inputs.model.buffer_bytes, 4, knobs.optimizer, transient, block);
  tensors.optimizer_state.clear();
  return predict_cuda_memory(tensors, inputs.conf, inputs.device);
}

Candidate make_candidate(const Calibration& c, const PlanRequest& request, std::int64_t micro_batch,
                         std::int64_t encoder_checkpointed, std::int64_t decoder_checkpointed,
                         optim::OptimizerType kind, int zero_stage, bool offload) {
  const BatchShape worst{1, request.source_length, request.target_length};
  Candidate candidate;
  candidate.knobs.micro_batch = micro_batch;
  candidate.knobs.accumulation = request.effective_batch / micro_batch;  // the effective batch is kept
  candidate.knobs.encoder_checkpointed = encoder_checkpointed;
  candidate.knobs.decoder_checkpointed = decoder_checkpointed;
  candidate.knobs.optimizer = kind;
  candidate.knobs.bf16 = request.bf16;
  candidate.knobs.world_size = request.world_size;
  candidate.knobs.zero_stage = zero_stage;
  candidate.knobs.bucket_bytes = request.bucket_bytes;
  candidate.knobs.offload_optimizer = offload;
  candidate.prediction = predict(c, candidate.knobs, worst, request.host_device_bytes_per_second);
  if (request.cuda) {
    const auto& p = candidate.prediction;
    candidate.cuda = candidate_cuda_terms(*request.cuda, candidate.knobs, worst.source,
                                          std::max(p.activations, p.optimizer_transient));
  }
  add_planned_evaluation(c, request, candidate);
  candidate.host_fits = !offload || with_margin(candidate.prediction.host, request.margin) <= request.host_budget;
  candidate.fits = needed_bytes(candidate, request) <= request.budget && candidate.host_fits;
  return candidate;
}

std::vector<std::int64_t> micro_batch_choices(const PlanRequest& request) {
  if (request.micro_batch) return {*request.micro_batch};
  std::vector<std::int64_t> out;
  for (std::int64_t m = request.effective_batch; m >= 1; --m) {
    if (request.effective_batch % m == 0) out.push_back(m);
  }
  return out;
}

std::vector<optim::OptimizerType> optimizer_choices(const PlanRequest& request) {
  const auto other = request.optimizer == optim::OptimizerType::adamw_torch ? optim::OptimizerType::adafactor
                                                                            : optim::OptimizerType::adamw_torch;
  if (request.optimizer_policy == OptimizerPolicy::fixed) return {request.optimizer};
  return {request.optimizer, other};
}

struct OptimizerChoice {
  optim::OptimizerType kind;
  int zero_stage;
  bool offload;
};

// Every optimizer with every ZeRO stage the request allows (stages 1 and 2 only with several processes), on the
// device and offloaded as the request allows (an offloaded optimizer only with stage 0, which keeps the whole state).
std::vector<OptimizerChoice> optimizer_choices_of(const PlanRequest& request,
                                                  const std::vector<optim::OptimizerType>& optimizers) {
  std::vector<int> stages = {0};
  if (request.zero_stage) {
    stages = {request.world_size > 1 ? *request.zero_stage : 0};
  } else if (request.world_size > 1) {
    stages = {0, 1, 2};
  }
  std::vector<OptimizerChoice> out;
  for (const auto kind : optimizers) {
    for (const auto stage : stages) {
      if (request.offload != OffloadPolicy::cpu) out.push_back({kind, stage, false});
      if (request.offload != OffloadPolicy::none && stage == 0) out.push_back({kind, stage, true});
    }
  }
  return out;
}

// The fastest fitting candidate among `allowed` optimizers. Ties are judged against the fastest fitting one, so
// the result does not depend on the order of the candidates.
std::optional<std::size_t> choose(const std::vector<Candidate>& candidates,
                                  const std::vector<optim::OptimizerType>& allowed) {
  const auto permitted = [&](const Candidate& k) {
    return k.fits && std::find(allowed.begin(), allowed.end(), k.knobs.optimizer) != allowed.end();
  };
  double fastest = 0.0;
  for (const auto& k : candidates) {
    if (permitted(k)) fastest = std::max(fastest, k.prediction.tokens_per_second);
  }
  std::optional<std::size_t> chosen;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const auto& k = candidates[i];
    if (!permitted(k) || k.prediction.tokens_per_second * (1.0 + kSpeedTie) < fastest) continue;
    if (!chosen) {
      chosen = i;
      continue;
    }
    // Within the band of the fastest: the fixed rule alone.
    const auto& best = candidates[*chosen];
    bool wins = false;
    if (k.knobs.offload_optimizer != best.knobs.offload_optimizer) {
      wins = !k.knobs.offload_optimizer;  // offloading only where it buys speed or a fit
    } else if (k.knobs.zero_stage != best.knobs.zero_stage) {
      wins = k.knobs.zero_stage < best.knobs.zero_stage;  // sharding only where it buys speed or a fit
    } else if (k.prediction.recompute_flops != best.prediction.recompute_flops) {
      wins = k.prediction.recompute_flops < best.prediction.recompute_flops;
    } else if (k.knobs.micro_batch != best.knobs.micro_batch) {
      wins = k.knobs.micro_batch > best.knobs.micro_batch;
    } else {
      wins = k.prediction.peak < best.prediction.peak;
    }
    if (wins) chosen = i;
  }
  return chosen;
}

std::string describe_knobs(const PlanKnobs& k, const Calibration& c) {
  std::ostringstream s;
  s << "micro-batch " << k.micro_batch << " x " << k.accumulation << " accumulation, checkpointing "
    << checkpointing_label(k, c.encoder_layers, c.decoder_layers) << ", " << optim::to_string(k.optimizer)
    << (k.bf16 ? ", bf16" : "") << (k.offload_optimizer ? ", the optimizer offloaded to the host" : "");
  if (k.world_size > 1) {
    s << ", " << k.world_size << " processes"
      << (k.zero_stage >= 2   ? " with the optimizer state and gradients sharded (ZeRO stage 2)"
          : k.zero_stage >= 1 ? " with the optimizer state sharded (ZeRO stage 1)"
                              : "");
  }
  return s.str();
}

// Offloaded candidates that fit the device but not the host: what the smallest of them needs of the host.
std::string host_refusal(const Plan& plan, const PlanRequest& request) {
  const Candidate* smallest = nullptr;
  for (const auto& k : plan.candidates) {
    if (!k.knobs.offload_optimizer || k.host_fits || needed_bytes(k, request) > request.budget) continue;
    if (!smallest || k.prediction.host < smallest->prediction.host) smallest = &k;
  }
  if (!smallest) return "";
  return "; with the optimizer offloaded to the host it fits the device, but needs " +
         util::format_bytes(with_margin(smallest->prediction.host, request.margin)) +
         " of host memory (optimizer state, weight and gradient copies, with the margin) and max_host_memory is " +
         util::format_bytes(request.host_budget) + ": raise --max_host_memory";
}

std::string explain_plan(const Plan& plan, const PlanRequest& request, const Calibration& c) {
  std::ostringstream why;
  const int margin_percent = static_cast<int>(request.margin * 100);
  const char* what = request.budget_caps_reserved ? "predicted reserved" : "predicted peak";
  if (!plan.chosen) {
    // The smallest may fit the device with the optimizer offloaded and be refused for the host alone: say both.
    const auto host = host_refusal(plan, request);
    const bool host_bound = !host.empty() && plan.minimum_budget <= request.budget;
    why << "no candidate fits in " << util::format_bytes(request.budget) << (host_bound ? " and max_host_memory" : "")
        << ": the smallest needs " << util::format_bytes(plan.minimum_budget) << (host_bound ? " of the device" : "")
        << " (" << what << " plus a " << margin_percent << "% margin)" << host;
    return why.str();
  }
  const auto& best = plan.candidates[*plan.chosen];
  std::size_t fitting = 0;
  for (const auto& k : plan.candidates) fitting += k.fits ? 1 : 0;
  why << "chose " << describe_knobs(best.knobs, c) << ": " << what << " "
      << util::format_bytes(budgeted_bytes(best, request)) << " of " << util::format_bytes(request.budget)
      << " (with a " << margin_percent << "% margin), "
      << static_cast<long long>(std::llround(best.prediction.tokens_per_second)) << " tokens/s, the fastest of the "
      << fitting << " of " << plan.candidates.size() << " candidates that fit (ties within "
      << static_cast<int>(kSpeedTie * 100) << "% go to "
      << (request.world_size > 1 ? "the lowest ZeRO stage, then " : "")
      << "the least recomputation, then the largest micro-batch)";
  const Candidate* fastest = nullptr;
  for (const auto& k : plan.candidates) {
    if (!fastest || k.prediction.tokens_per_second > fastest->prediction.tokens_per_second) fastest = &k;
  }
  if (fastest && !fastest->fits &&
      fastest->prediction.tokens_per_second > best.prediction.tokens_per_second * (1.0 + kSpeedTie)) {
    why << "; the fastest overall (" << describe_knobs(fastest->knobs, c) << ", "
        << static_cast<long long>(std::llround(fastest->prediction.tokens_per_second)) << " tokens/s) needs "
        << util::format_bytes(needed_bytes(*fastest, request));
  }
  return why.str();
}

}  // namespace

Plan choose_plan(const Calibration& c, const PlanRequest& request) {
  if (request.effective_batch < 1) throw std::invalid_argument("the effective batch must be at least 1");
  const auto e = c.encoder_layers, d = c.decoder_layers;
  const auto optimizers = optimizer_choices(request);
  Plan plan;
  plan.encoder_layers = e;
  plan.decoder_layers = d;
  plan.minimum_budget = std::numeric_limits<std::uint64_t>::max();
  for (const auto m : micro_batch_choices(request)) {
    for (const auto& [kind, zero, offload] : optimizer_choices_of(request, optimizers)) {
      if (request.checkpointed_layers) {
        const auto [ce, cd] = *request.checkpointed_layers;
        plan.candidates.push_back(make_candidate(c, request, m, std::min(ce, e), std::min(cd, d), kind, zero, offload));
        plan.minimum_budget = std::min(plan.minimum_budget, needed_bytes(plan.candidates.back(), request));
        continue;
      }
      auto none = make_candidate(c, request, m, 0, 0, kind, zero, offload);
      auto every = make_candidate(c, request, m, e, d, kind, zero, offload);
      plan.minimum_budget = std::min({plan.minimum_budget, needed_bytes(none, request), needed_bytes(every, request)});
      // Between the two, the set with the least recomputation that fits: every (ce, cd) is tried, which is exact
      // because the bottom layers of a stack are the cheapest to checkpoint (see the top of planner.h).
      std::optional<Candidate> partial;
      if (!none.fits && every.fits) {
        for (std::int64_t ce = 0; ce <= e; ++ce) {
          for (std::int64_t cd = 0; cd <= d; ++cd) {
            if ((ce == 0 && cd == 0) || (ce == e && cd == d)) continue;
            auto k = make_candidate(c, request, m, ce, cd, kind, zero, offload);
            if (!k.fits) continue;
            if (!partial || k.prediction.recompute_flops < partial->prediction.recompute_flops ||
                (k.prediction.recompute_flops == partial->prediction.recompute_flops &&
                 k.prediction.peak < partial->prediction.peak)) {
              partial = k;
            }
          }
        }
      }
      plan.candidates.push_back(none);
      if (partial) plan.candidates.push_back(*partial);
      plan.candidates.push_back(every);
    }
  }
  if (request.optimizer_policy == OptimizerPolicy::free) {
    plan.chosen = choose(plan.candidates, optimizers);
  } else {
    plan.chosen = choose(plan.candidates, {request.optimizer});
    if (!plan.chosen && request.optimizer_policy == OptimizerPolicy::preferred) {
      plan.chosen = choose(plan.candidates, optimizers);
      if (plan.chosen) {
        // What the preferred optimizer would need at the least: for the warning.
        for (const auto& k : plan.candidates) {
          if (k.knobs.optimizer != request.optimizer) continue;
          if (!plan.preferred_optimizer_best ||
              needed_bytes(k, request) < needed_bytes(*plan.preferred_optimizer_best, request)) {
            plan.preferred_optimizer_best = k;
          }
        }
      }
    }
  }
  plan.explanation = explain_plan(plan, request, c);
  return plan;
}

}  // namespace fitsum::memory
