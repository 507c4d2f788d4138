// Implements planning.h.
#include "planning.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include "fitsum/util/bytes.h"

namespace fitsum::cli {

namespace {

std::string mib(std::uint64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buffer;
}

// The chosen candidate's CUDA terms in one line (docs/memory.md, "On CUDA").
std::string cuda_line(const memory::CudaMemoryTerms& t) {
  std::ostringstream out;
  out << "CUDA (chosen): allocated " << util::format_bytes(t.allocated) << ", reserved "
      << util::format_bytes(t.reserved) << " (block rounding " << util::format_bytes(t.block_rounding)
      << ", small-pool slack " << util::format_bytes(t.small_pool_slack) << ", large-segment slack "
      << util::format_bytes(t.large_segment_slack) << ", cuBLAS workspace " << util::format_bytes(t.cublas_workspace)
      << "), with the CUDA context " << util::format_bytes(t.device_total) << "\n";
  return out.str();
}

// The chosen candidate's offload terms in one line (docs/memory.md, "Optimizer offload").
std::string offload_line(const memory::Prediction& p) {
  std::ostringstream out;
  out << "offload (chosen): host " << util::format_bytes(p.host)
      << " (optimizer state, weight and gradient copies, the update's transient); "
      << util::format_bytes(p.transfer_bytes) << " copied each way per step, " << p.transfer_seconds
      << " s of copies and " << p.host_update_seconds << " s of host update in the step's time\n";
  return out.str();
}

// What the probe measured on its device, its own peaks (max_memory_allocated and max_memory_reserved on CUDA; on
// the CPU reserved equals allocated), per micro-step of a reduced-depth copy and for the optimizer steps.
nlohmann::ordered_json probe_json(const memory::Calibration& c) {
  static const char* const kModes[] = {"none", "all", "bottom", "bottom_encoder"};
  nlohmann::ordered_json j;
  std::uint64_t allocated = 0, reserved = 0;
  auto samples = nlohmann::ordered_json::array();
  for (const auto& s : c.samples) {
    allocated = std::max(allocated, s.peak_allocated_bytes);
    reserved = std::max(reserved, s.peak_reserved_bytes);
    samples.push_back({{"batch", s.shape.batch},
                       {"source_length", s.shape.source},
                       {"target_length", s.shape.target},
                       {"encoder_layers", s.encoder_layers},
                       {"decoder_layers", s.decoder_layers},
                       {"checkpointing", kModes[static_cast<int>(s.checkpointing)]},
                       {"peak_allocated_bytes", s.peak_allocated_bytes},
                       {"peak_reserved_bytes", s.peak_reserved_bytes}});
  }
  j["peak_allocated_bytes"] = allocated;
  j["peak_reserved_bytes"] = reserved;
  j["optimizer_peak_reserved_bytes"] = {{"adamw_torch", c.adamw.peak_reserved_bytes},
                                        {"adafactor", c.adafactor.peak_reserved_bytes}};
  j["seconds"] = c.probe_seconds;
  j["samples"] = std::move(samples);
  return j;
}

}  // namespace

std::string plan_table(const memory::FitResult& fit) {
  const auto& plan = fit.plan;
  const auto& c = *fit.calibration;
  std::ostringstream out;
  char line[320];
  // With several processes, a column for the ZeRO stage; the numbers are per process.
  const bool parallel = !plan.candidates.empty() && plan.candidates.front().knobs.world_size > 1;
  const auto stage = [&](const memory::Candidate& k) {
    return parallel ? "    " + std::to_string(k.knobs.zero_stage) : "";
  };
  // With offloaded candidates, a column saying which offload and what each needs of the host.
  const bool offloading = std::any_of(plan.candidates.begin(), plan.candidates.end(),
                                      [](const memory::Candidate& k) { return k.knobs.offload_optimizer; });
  const auto host = [&](const memory::Candidate& k) {
    if (!offloading) return std::string();
    return k.knobs.offload_optimizer
               ? " " + std::string(8 - std::min<std::size_t>(8, mib(k.prediction.host).size()), ' ') +
                     mib(k.prediction.host)
               : std::string("        -");
  };
  std::snprintf(line, sizeof line, "%-3s %5s %5s %-22s %-11s %4s%s%s | %9s %9s %9s %9s %9s | %10s %8s %s\n", "#",
                "micro", "accum", "ckpt", "optim", "bf16", parallel ? " zero" : "", offloading ? " host MiB" : "",
                "peak MiB", "weights", "grads", "opt", "activ", "tokens/s", "step s", "fits");
  out << line;
  for (std::size_t i = 0; i < plan.candidates.size(); ++i) {
    const auto& k = plan.candidates[i];
    const auto& p = k.prediction;
    std::snprintf(line, sizeof line, "%-3zu %5lld %5lld %-22s %-11s %4s%s%s | %9s %9s %9s %9s %9s | %10.0f %8.3f %s%s\n",
                  i, static_cast<long long>(k.knobs.micro_batch), static_cast<long long>(k.knobs.accumulation),
                  memory::checkpointing_label(k.knobs, c.encoder_layers, c.decoder_layers).c_str(),
                  optim::to_string(k.knobs.optimizer), k.knobs.bf16 ? "yes" : "no", stage(k).c_str(), host(k).c_str(),
                  mib(p.peak).c_str(), mib(p.weights).c_str(), mib(p.gradients).c_str(), mib(p.optimizer_state).c_str(),
                  mib(std::max(p.activations, p.optimizer_transient)).c_str(), p.tokens_per_second, p.step_seconds,
                  k.fits ? "yes" : "no", plan.chosen && *plan.chosen == i ? "  <- chosen" : "");
    out << line;
  }
  out << "budget " << util::format_bytes(fit.budget) << (fit.budget_caps_reserved ? " (caps CUDA's reserved bytes)" : "")
      << "; " << plan.explanation << "\n";
  if (plan.chosen && plan.candidates[*plan.chosen].knobs.eval_batch > 0) {
    const auto& k = plan.candidates[*plan.chosen];
    out << "evaluation (chosen): per_device_eval_batch_size " << k.knobs.eval_batch << ", "
        << util::format_bytes(k.prediction.evaluation)
        << " above weights, gradients and optimizer state (loss pass, generation with its key/value cache)\n";
  }
  if (plan.chosen && plan.candidates[*plan.chosen].cuda) out << cuda_line(*plan.candidates[*plan.chosen].cuda);
  if (plan.chosen && plan.candidates[*plan.chosen].knobs.offload_optimizer) {
    out << offload_line(plan.candidates[*plan.chosen].prediction);
  }
  if (fit.cuda_plan_from_cpu) {
    out << "speeds (tokens/s, step s) are this machine's CPU's, measured by the probe: memory is predicted for the "
           "CUDA device, speed is not, and on the GPU the fastest fitting candidate may be another\n";
  }
  return out.str();
}

nlohmann::ordered_json candidate_json(const memory::Candidate& k) {
  nlohmann::ordered_json j;
  j["per_device_train_batch_size"] = k.knobs.micro_batch;
  j["gradient_accumulation_steps"] = k.knobs.accumulation;
  j["gradient_checkpointing_encoder_layers"] = k.knobs.encoder_checkpointed;
  j["gradient_checkpointing_decoder_layers"] = k.knobs.decoder_checkpointed;
  j["optim"] = optim::to_string(k.knobs.optimizer);
  j["bf16"] = k.knobs.bf16;
  if (k.knobs.world_size > 1) {  // per process, for each of world_size
    j["world_size"] = k.knobs.world_size;
    j["zero_stage"] = k.knobs.zero_stage;
  }
  if (k.knobs.eval_batch > 0) j["per_device_eval_batch_size"] = k.knobs.eval_batch;
  j["predicted_peak_bytes"] = k.prediction.peak;
  j["offload_optimizer"] = k.knobs.offload_optimizer ? "cpu" : "none";
  j["predicted_step_flops"] = k.prediction.step_flops;
  j["predicted_recompute_flops"] = k.prediction.recompute_flops;
  j["predicted_tokens_per_s"] = k.prediction.tokens_per_second;
  j["predicted_step_seconds"] = k.prediction.step_seconds;
  j["fits"] = k.fits;
  j["breakdown"] = {{"weights", k.prediction.weights},
                    {"gradients", k.prediction.gradients},
                    {"optimizer_state", k.prediction.optimizer_state},
                    {"activations", k.prediction.activations},
                    {"optimizer_step_transient", k.prediction.optimizer_transient}};
  if (k.knobs.eval_batch > 0) j["breakdown"]["evaluation"] = k.prediction.evaluation;
  if (k.cuda) j["breakdown"]["cuda"] = memory::to_json(*k.cuda);
  if (k.knobs.offload_optimizer) {  // the host's terms; optimizer_state and the step's transient above are then 0
    j["breakdown"]["host"] = {{"bytes", k.prediction.host},
                              {"fits_max_host_memory", k.host_fits},
                              {"transfer_bytes_each_way", k.prediction.transfer_bytes},
                              {"transfer_seconds", k.prediction.transfer_seconds},
                              {"host_update_seconds", k.prediction.host_update_seconds}};
  }
  return j;
}

nlohmann::ordered_json plan_json(const memory::FitResult& fit, std::uint64_t budget) {
  nlohmann::ordered_json j;
  j["budget_bytes"] = budget;
  j["budget_caps"] = fit.budget_caps_reserved ? "reserved" : "peak";  // on CUDA: the caching allocator's reservation
  if (fit.cuda_alloc_conf) j["cuda_alloc_conf"] = memory::to_json(*fit.cuda_alloc_conf);
  // What the memory terms are for, and where the probe that measured the speeds ran.
  const bool for_cuda = fit.cuda_alloc_conf.has_value() || fit.budget_caps_reserved;
  j["planned_for"] = for_cuda ? "cuda" : "cpu";
  j["speeds_measured_on"] = for_cuda && !fit.cuda_plan_from_cpu ? "cuda" : "cpu";
  j["candidates"] = nlohmann::ordered_json::array();
  for (const auto& k : fit.plan.candidates) j["candidates"].push_back(candidate_json(k));
  j["chosen"] = fit.chosen ? candidate_json(*fit.chosen) : nlohmann::ordered_json(nullptr);
  // Beside the prediction, what the probe measured where it ran (speeds_measured_on): allocated and reserved peaks.
  if (fit.calibration) j["probe"] = probe_json(*fit.calibration);
  j["minimum_budget_bytes"] = fit.minimum_budget;
  // Full fine-tuning does not fit: the LoRA configuration that would (its flags and plan), or null.
  if (fit.lora_suggestion) {
    j["lora_suggestion"] = {{"arguments", fit.lora_suggestion->arguments},
                            {"plan", candidate_json(fit.lora_suggestion->plan)}};
  } else {
    j["lora_suggestion"] = nullptr;
  }
  j["explanation"] = fit.explanation;
  return j;
}

}  // namespace fitsum::cli
