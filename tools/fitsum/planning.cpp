// Implements tools/fitsum/planning.h.
#include "planning.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include <torch/cuda.h>

#include "fitsum/memory/device_memory.h"
#include "fitsum/optim/optimizers.h"
#include "fitsum/util/bytes.h"
#include "fitsum/util/device.h"

namespace fitsum::cli {

torch::Device resolve_device(const std::string& name) { return util::parse_device(name); }

memory::BatchShape worst_batch_shape(const std::vector<data::Example>& examples, const data::DataOptions& data) {
  memory::BatchShape worst{1, data.max_source_length, data.max_target_length};
  if (!examples.empty()) {
    worst.source = 1;
    worst.target = 1;
    for (const auto& e : examples) {
      worst.source = std::max<std::int64_t>(worst.source, static_cast<std::int64_t>(e.input_ids.size()));
      if (e.labels) worst.target = std::max<std::int64_t>(worst.target, static_cast<std::int64_t>(e.labels->size()));
    }
  }
  if (data.pad_to_multiple_of && *data.pad_to_multiple_of > 1) {
    const auto m = *data.pad_to_multiple_of;
    worst.source = (worst.source + m - 1) / m * m;
    worst.target = (worst.target + m - 1) / m * m;
  }
  return worst;
}

memory::PlanRequest make_plan_request(const CLI::App& command, const TrainCommandOptions& o,
                                      const memory::BatchShape& worst, std::uint64_t budget) {
  const auto& t = o.training;
  memory::PlanRequest request;
  request.effective_batch = t.per_device_train_batch_size * t.gradient_accumulation_steps;
  request.source_length = worst.source;
  request.target_length = worst.target;
  if (o.no_resplit) request.micro_batch = t.per_device_train_batch_size;
  const auto* optim_flag = command.get_option("--optim");
  if (optim_flag->count() > 0 && optim_flag->as<std::string>() != "auto") {
    request.optimizer = optim::optimizer_type_from_string(t.optim) == optim::OptimizerType::adafactor
                            ? memory::OptimizerKind::adafactor
                            : memory::OptimizerKind::adamw;
  }
  if (command.get_option("--gradient_checkpointing")->count() > 0) {
    request.checkpointed_layers =
        t.gradient_checkpointing ? t.gradient_checkpointing_layers.value_or(std::numeric_limits<std::int64_t>::max())
                                 : 0;
  }
  request.bf16 = t.bf16;
  request.budget = budget;
  return request;
}

void apply_plan(train::TrainingArguments& args, const memory::Candidate& candidate, std::int64_t layers) {
  const auto& k = candidate.knobs;
  args.per_device_train_batch_size = k.micro_batch;
  args.gradient_accumulation_steps = k.accumulation;
  args.gradient_checkpointing = k.checkpointed_layers > 0;
  args.gradient_checkpointing_layers.reset();
  if (k.checkpointed_layers > 0 && k.checkpointed_layers < layers)
    args.gradient_checkpointing_layers = k.checkpointed_layers;
  args.optim = k.optimizer == memory::OptimizerKind::adafactor ? "adafactor" : "adamw_torch";
  args.bf16 = k.bf16;
}

std::string plan_flags(const memory::Candidate& candidate, std::int64_t layers) {
  const auto& k = candidate.knobs;
  std::ostringstream out;
  out << "--per_device_train_batch_size " << k.micro_batch << " --gradient_accumulation_steps " << k.accumulation;
  if (k.checkpointed_layers > 0) out << " --gradient_checkpointing";
  if (k.checkpointed_layers > 0 && k.checkpointed_layers < layers) {
    out << " --gradient_checkpointing_layers " << k.checkpointed_layers;
  }
  out << " --optim " << (k.optimizer == memory::OptimizerKind::adafactor ? "adafactor" : "adamw_torch");
  if (k.bf16) out << " --bf16";
  return out.str();
}

namespace {

std::string mib(std::uint64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buffer;
}

}  // namespace

std::string plan_table(const memory::Plan& plan, const memory::Calibration& c, std::uint64_t budget) {
  const auto layers = std::max(c.encoder_layers, c.decoder_layers);
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%-3s %5s %5s %-9s %-9s %4s | %9s %9s %9s %9s %9s | %10s %8s %s\n", "#", "micro",
                "accum", "ckpt", "optim", "bf16", "peak MiB", "weights", "grads", "opt", "activ", "tokens/s", "step s",
                "fits");
  out << line;
  for (std::size_t i = 0; i < plan.candidates.size(); ++i) {
    const auto& k = plan.candidates[i];
    const auto& p = k.prediction;
    std::snprintf(line, sizeof line, "%-3zu %5lld %5lld %-9s %-9s %4s | %9s %9s %9s %9s %9s | %10.0f %8.3f %s%s\n", i,
                  static_cast<long long>(k.knobs.micro_batch), static_cast<long long>(k.knobs.accumulation),
                  memory::checkpointing_label(k.knobs.checkpointed_layers, layers).c_str(),
                  memory::to_string(k.knobs.optimizer), k.knobs.bf16 ? "yes" : "no", mib(p.peak).c_str(),
                  mib(p.weights).c_str(), mib(p.gradients).c_str(), mib(p.optimizer_state).c_str(),
                  mib(std::max(p.activations, p.optimizer_transient)).c_str(), p.tokens_per_second, p.step_seconds,
                  k.fits ? "yes" : "no", plan.chosen && *plan.chosen == i ? "  <- chosen" : "");
    out << line;
  }
  out << "budget " << util::format_bytes(budget) << "; " << plan.explanation << "\n";
  return out.str();
}

nlohmann::ordered_json candidate_json(const memory::Candidate& k) {
  nlohmann::ordered_json j;
  j["per_device_train_batch_size"] = k.knobs.micro_batch;
  j["gradient_accumulation_steps"] = k.knobs.accumulation;
  j["gradient_checkpointing_layers"] = k.knobs.checkpointed_layers;
  j["optim"] = k.knobs.optimizer == memory::OptimizerKind::adafactor ? "adafactor" : "adamw_torch";
  j["bf16"] = k.knobs.bf16;
  j["predicted_peak_bytes"] = k.prediction.peak;
  j["predicted_tokens_per_s"] = k.prediction.tokens_per_second;
  j["predicted_step_seconds"] = k.prediction.step_seconds;
  j["fits"] = k.fits;
  j["breakdown"] = {{"weights", k.prediction.weights},
                    {"gradients", k.prediction.gradients},
                    {"optimizer_state", k.prediction.optimizer_state},
                    {"activations", k.prediction.activations},
                    {"optimizer_step_transient", k.prediction.optimizer_transient}};
  return j;
}

nlohmann::ordered_json plan_json(const memory::Plan& plan, std::uint64_t budget) {
  nlohmann::ordered_json j;
  j["budget_bytes"] = budget;
  j["candidates"] = nlohmann::ordered_json::array();
  for (const auto& k : plan.candidates) j["candidates"].push_back(candidate_json(k));
  j["chosen"] = plan.chosen ? candidate_json(plan.candidates[*plan.chosen]) : nlohmann::ordered_json(nullptr);
  j["minimum_budget_bytes"] = plan.minimum_budget;
  j["explanation"] = plan.explanation;
  return j;
}

memory::CudaMemoryTerms CudaPlanning::terms(const memory::Candidate& candidate) const {
  const auto& p = candidate.prediction;
  return memory::predict_cuda_memory(tensors, candidate.knobs.optimizer, candidate.knobs.micro_batch, worst.source,
                                     std::max(p.activations, p.optimizer_transient), conf, device);
}

CudaPlanning cuda_planning(model::Seq2SeqLMImpl& model, const memory::CudaAllocConf& conf, const torch::Device& device,
                           const memory::BatchShape& worst) {
  CudaPlanning cuda;
  for (const auto& p : model.parameters()) cuda.tensors.parameter_shapes.push_back(p.sizes().vec());
  for (const auto& b : model.buffers()) {
    cuda.tensors.buffer_bytes.push_back(static_cast<std::uint64_t>(b.numel() * b.element_size()));
  }
  cuda.tensors.d_model = model.config().d_model;
  cuda.conf = conf;
  cuda.device = memory::cuda_device_facts(device);
  cuda.worst = worst;
  return cuda;
}

void budget_reserved_bytes(memory::PlanRequest& request, const CudaPlanning& cuda) {
  request.budgeted_bytes = [cuda](const memory::Candidate& candidate) { return cuda.terms(candidate).reserved; };
}

void add_cuda_breakdown(nlohmann::ordered_json& json, const memory::Plan& plan, const CudaPlanning& cuda) {
  for (std::size_t i = 0; i < plan.candidates.size(); ++i) {
    json["candidates"][i]["breakdown"]["cuda"] = memory::to_json(cuda.terms(plan.candidates[i]));
  }
  if (plan.chosen) json["chosen"]["breakdown"]["cuda"] = memory::to_json(cuda.terms(plan.candidates[*plan.chosen]));
  json["cuda_alloc_conf"] = memory::to_json(cuda.conf);
}

std::string cuda_summary(const memory::Plan& plan, const CudaPlanning& cuda) {
  if (!plan.chosen) return "";
  const auto t = cuda.terms(plan.candidates[*plan.chosen]);
  std::ostringstream out;
  out << "CUDA (chosen, PYTORCH_CUDA_ALLOC_CONF '" << cuda.conf.text << "'): allocated "
      << util::format_bytes(t.allocated) << ", reserved " << util::format_bytes(t.reserved) << " (block rounding "
      << util::format_bytes(t.block_rounding) << ", small-pool slack " << util::format_bytes(t.small_pool_slack)
      << ", large-segment slack " << util::format_bytes(t.large_segment_slack) << ", cuBLAS workspace "
      << util::format_bytes(t.cublas_workspace) << "), with the CUDA context " << util::format_bytes(t.device_total)
      << "\n";
  return out.str();
}

}  // namespace fitsum::cli
