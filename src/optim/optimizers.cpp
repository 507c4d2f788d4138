// Implements include/fitsum/optim/optimizers.h. The update formulas follow torch.optim.AdamW (single-tensor path)
// and transformers.optimization.Adafactor line by line, so results agree to float rounding.
#include "fitsum/optim/optimizers.h"

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <torch/torch.h>

#include "fitsum/optim/fused_steps.h"

namespace fitsum::optim {

namespace {

// torch::optim::Optimizer::state() is keyed by the parameter's TensorImpl address written as a string
// (c10::guts::to_string) in LibTorch 1.13, by the address itself in recent 2.x, where c10::guts::to_string is gone.
// The key type is read off the map, so no version test is needed (docs/platforms.md).
using StateMap = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;

template <typename Map>
typename Map::key_type state_key_of(void* impl) {
  if constexpr (std::is_same_v<typename Map::key_type, std::string>) {
    std::ostringstream key;  // what c10::guts::to_string writes for a pointer
    key << impl;
    return key.str();
  } else {
    return impl;
  }
}

StateMap::key_type state_key(const torch::Tensor& p) { return state_key_of<StateMap>(p.unsafeGetTensorImpl()); }

torch::Tensor step_tensor(std::int64_t step) { return torch::tensor(step, torch::kLong); }

const torch::Tensor& require(const std::map<std::string, torch::Tensor>& in, const std::string& key,
                             at::IntArrayRef shape) {
  const auto it = in.find(key);
  if (it == in.end()) {
    throw std::runtime_error("optimizer state has no entry '" + key + "'");
  }
  if (it->second.sizes() != shape) {
    throw std::runtime_error("optimizer state '" + key + "' has shape " + c10::str(it->second.sizes()) +
                             ", the parameter needs " + c10::str(shape));
  }
  return it->second;
}

// Adds `groups` with their own options. Optimizer's constructor cannot be trusted with them: the add_param_group of
// recent LibTorch 2.x (2.14 here; pytorch/pytorch's torch/csrc/api/src/optim/optimizer.cpp) merges a group's options
// with the defaults for LibTorch's own optimizers only and gives any other optimizer's groups the defaults, which
// would silently drop make_optimizer's weight decay.
void add_groups(torch::optim::Optimizer& optimizer, const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  for (const auto& group : groups) {
    optimizer.add_param_group(torch::optim::OptimizerParamGroup(group.params()));
    if (group.has_options()) optimizer.param_groups().back().set_options(group.options().clone());
  }
}

std::int64_t require_step(const std::map<std::string, torch::Tensor>& in, const std::string& key) {
  return require(in, key, {}).item<std::int64_t>();
}

// HF Adafactor's _rms: ||t||_2 / sqrt(numel)
torch::Tensor rms(const torch::Tensor& t) { return t.norm(2) / std::sqrt(static_cast<double>(t.numel())); }

}  // namespace

// ---- AdamW ----

void AdamWParamState::export_tensors(const std::string& prefix, NamedTensors& out) const {
  out.emplace_back(prefix + ".step", step_tensor(step));
  out.emplace_back(prefix + ".exp_avg", exp_avg);
  out.emplace_back(prefix + ".exp_avg_sq", exp_avg_sq);
}

void AdamWParamState::import_tensors(const std::string& prefix, const std::map<std::string, torch::Tensor>& in,
                                     const torch::Tensor& param) {
  step = require_step(in, prefix + ".step");
  exp_avg = require(in, prefix + ".exp_avg", param.sizes()).to(param.options()).clone();
  exp_avg_sq = require(in, prefix + ".exp_avg_sq", param.sizes()).to(param.options()).clone();
}

AdamW::AdamW(std::vector<torch::optim::OptimizerParamGroup> groups, AdamWOptions defaults)
    : torch::optim::Optimizer(std::vector<torch::optim::OptimizerParamGroup>{},
                              std::make_unique<AdamWOptions>(defaults)) {
  add_groups(*this, groups);
  TORCH_CHECK(defaults.lr() >= 0, "AdamW: invalid learning_rate ", defaults.lr());
  TORCH_CHECK(defaults.eps() >= 0, "AdamW: invalid adam_epsilon ", defaults.eps());
  TORCH_CHECK(defaults.beta1() >= 0 && defaults.beta1() < 1, "AdamW: adam_beta1 must be in [0, 1), got ",
              defaults.beta1());
  TORCH_CHECK(defaults.beta2() >= 0 && defaults.beta2() < 1, "AdamW: adam_beta2 must be in [0, 1), got ",
              defaults.beta2());
}

torch::Tensor AdamW::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  update({});
  return loss;
}

namespace {

AdamWParamState& adamw_state(std::unique_ptr<torch::optim::OptimizerParamState>& slot, const torch::Tensor& p) {
  if (!slot) {
    auto fresh = std::make_unique<AdamWParamState>();
    fresh->exp_avg = torch::zeros_like(p, torch::MemoryFormat::Preserve);
    fresh->exp_avg_sq = torch::zeros_like(p, torch::MemoryFormat::Preserve);
    slot = std::move(fresh);
  }
  return static_cast<AdamWParamState&>(*slot);
}

// `grad_scale`: the clipping factor where the kernel applies it (the fused CPU kernels, host_clip_factor), 1 where the
// gradients were scaled already (the multi-tensor kernels' share: by the factor on its device, with no host read).
AdamWStepScalars adamw_scalars(const AdamWOptions& o, std::int64_t step, double grad_scale, bool zero_grad) {
  AdamWStepScalars scalars;
  scalars.lr = o.lr();
  scalars.beta1 = o.beta1();
  scalars.beta2 = o.beta2();
  scalars.eps = o.eps();
  scalars.weight_decay = o.weight_decay();
  scalars.step = step;
  scalars.grad_scale = grad_scale;
  scalars.zero_grad = zero_grad;
  return scalars;
}

// torch.optim.AdamW's single-tensor formulas (the fused kernels' reference).
void adamw_tensor_update(torch::Tensor& p, torch::Tensor& grad, AdamWParamState& s, const AdamWOptions& o,
                         const GradientTreatment& treatment) {
  if (treatment.scale.defined()) grad.mul_(treatment.scale);
  p.mul_(1.0 - o.lr() * o.weight_decay());
  s.exp_avg.mul_(o.beta1()).add_(grad, 1.0 - o.beta1());
  s.exp_avg_sq.mul_(o.beta2()).addcmul_(grad, grad, 1.0 - o.beta2());
  const double bias_correction1 = 1.0 - std::pow(o.beta1(), static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(o.beta2(), static_cast<double>(s.step));
  const double step_size = o.lr() / bias_correction1;
  auto denom = (s.exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(o.eps());
  p.addcdiv_(s.exp_avg, denom, -step_size);
  if (treatment.zero_after) grad.zero_();
}

}  // namespace

void AdamW::update(const GradientTreatment& treatment) {
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const AdamWOptions&>(group.options());
    std::map<std::int64_t, std::vector<AdamWTensors>> batches;  // the multi-tensor kernels' share, by step count
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& grad = p.mutable_grad();
      auto& s = adamw_state(state()[state_key(p)], p);
      s.step += 1;
      const auto kernel = choose_update_kernel(p, grad, o.fused(), o.update_path());
      const bool contiguous_state = s.exp_avg.is_contiguous() && s.exp_avg_sq.is_contiguous();
      if (kernel == UpdateKernel::multi_tensor && contiguous_state) {
        if (treatment.scale.defined()) grad.mul_(treatment.scale);
        batches[s.step].push_back({p, grad, s.exp_avg, s.exp_avg_sq});
      } else if (kernel == UpdateKernel::fitsum_cpu && contiguous_state) {
        fused_adamw_step(p, grad, s.exp_avg, s.exp_avg_sq,
                         adamw_scalars(o, s.step, host_clip_factor(treatment), treatment.zero_after));
      } else {
        adamw_tensor_update(p, grad, s, o, treatment);
      }
    }
    for (const auto& [step, batch] : batches) {
      multi_tensor_adamw_step(batch, adamw_scalars(o, step, 1.0, treatment.zero_after));
    }
  }
}

// ---- Adafactor ----

void AdafactorParamState::export_tensors(const std::string& prefix, NamedTensors& out) const {
  out.emplace_back(prefix + ".step", step_tensor(step));
  if (exp_avg_sq_row.defined()) {
    out.emplace_back(prefix + ".exp_avg_sq_row", exp_avg_sq_row);
    out.emplace_back(prefix + ".exp_avg_sq_col", exp_avg_sq_col);
  } else {
    out.emplace_back(prefix + ".exp_avg_sq", exp_avg_sq);
  }
}

void AdafactorParamState::import_tensors(const std::string& prefix, const std::map<std::string, torch::Tensor>& in,
                                         const torch::Tensor& param) {
  step = require_step(in, prefix + ".step");
  const auto fp32 = param.options().dtype(torch::kFloat);
  if (param.dim() >= 2) {
    auto rows = param.sizes().vec();
    rows.pop_back();
    auto cols = param.sizes().vec();
    cols.erase(cols.end() - 2);
    exp_avg_sq_row = require(in, prefix + ".exp_avg_sq_row", rows).to(fp32).clone();
    exp_avg_sq_col = require(in, prefix + ".exp_avg_sq_col", cols).to(fp32).clone();
  } else {
    exp_avg_sq = require(in, prefix + ".exp_avg_sq", param.sizes()).to(fp32).clone();
  }
}

Adafactor::Adafactor(std::vector<torch::optim::OptimizerParamGroup> groups, AdafactorOptions defaults)
    : torch::optim::Optimizer(std::vector<torch::optim::OptimizerParamGroup>{},
                              std::make_unique<AdafactorOptions>(defaults)) {
  add_groups(*this, groups);
  TORCH_CHECK(defaults.lr() >= 0, "Adafactor: invalid learning_rate ", defaults.lr());
  TORCH_CHECK(defaults.clip_threshold() > 0, "Adafactor: clip_threshold must be positive");
}

namespace {

// HF Adafactor's update of one parameter with the tensor ops (the fused kernels' reference), the gradient already
// clipped: the second moment, the update and its RMS clip, weight decay, p -= lr * update.
void adafactor_tensor_update(torch::Tensor& p, const torch::Tensor& grad, AdafactorParamState& s,
                             const AdafactorOptions& o, double beta2t) {
  const double lr = o.lr();  // relative_step=False, scale_parameter=False: the learning rate as given
  auto update = grad * grad + o.eps1();
  if (p.dim() >= 2) {
    s.exp_avg_sq_row.mul_(beta2t).add_(update.mean(-1), 1.0 - beta2t);
    s.exp_avg_sq_col.mul_(beta2t).add_(update.mean(-2), 1.0 - beta2t);
    // HF _approx_sq_grad: (row / mean(row)).rsqrt() ⊗ col.rsqrt()
    auto r_factor = (s.exp_avg_sq_row / s.exp_avg_sq_row.mean(-1, /*keepdim=*/true)).rsqrt_().unsqueeze(-1);
    auto c_factor = s.exp_avg_sq_col.unsqueeze(-2).rsqrt();
    update = torch::mul(r_factor, c_factor);
    update.mul_(grad);
  } else {
    s.exp_avg_sq.mul_(beta2t).add_(update, 1.0 - beta2t);
    update = s.exp_avg_sq.rsqrt().mul_(grad);
  }
  update.div_((rms(update) / o.clip_threshold()).clamp_(1.0));
  update.mul_(lr);
  auto p32 = p.scalar_type() == torch::kFloat ? p : p.to(torch::kFloat);
  if (o.weight_decay() != 0.0) {
    p32.add_(p32, -o.weight_decay() * lr);
  }
  p32.add_(-update);
  if (p32.data_ptr() != p.data_ptr()) {
    p.copy_(p32);
  }
}

std::unique_ptr<AdafactorParamState> fresh_adafactor_state(const torch::Tensor& p) {
  auto fresh = std::make_unique<AdafactorParamState>();
  const auto fp32 = p.options().dtype(torch::kFloat);
  if (p.dim() >= 2) {
    fresh->exp_avg_sq_row = torch::zeros(p.sizes().slice(0, p.dim() - 1), fp32);
    auto cols = p.sizes().vec();
    cols.erase(cols.end() - 2);
    fresh->exp_avg_sq_col = torch::zeros(cols, fp32);
  } else {
    fresh->exp_avg_sq = torch::zeros(p.sizes(), fp32);
  }
  return fresh;
}

}  // namespace

torch::Tensor Adafactor::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  update({});
  return loss;
}

namespace {

// `grad_scale` as adamw_scalars'.
AdafactorStepScalars adafactor_scalars(const AdafactorOptions& o, std::int64_t step, double grad_scale,
                                       bool zero_grad) {
  AdafactorStepScalars scalars;
  scalars.lr = o.lr();
  scalars.beta2t = 1.0 - std::pow(static_cast<double>(step), o.decay_rate());
  scalars.eps1 = o.eps1();
  scalars.clip_threshold = o.clip_threshold();
  scalars.weight_decay = o.weight_decay();
  scalars.grad_scale = grad_scale;
  scalars.zero_grad = zero_grad;
  return scalars;
}

}  // namespace

void Adafactor::update(const GradientTreatment& treatment) {
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const AdafactorOptions&>(group.options());
    std::map<std::int64_t, std::vector<AdafactorTensors>> batches;  // the multi-tensor kernels' share, by step count
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = state()[state_key(p)];
      if (!slot) slot = fresh_adafactor_state(p);
      auto& s = static_cast<AdafactorParamState&>(*slot);
      s.step += 1;
      auto& grad = p.mutable_grad();
      const auto kernel = choose_update_kernel(p, grad, o.fused(), o.update_path());
      if (kernel == UpdateKernel::multi_tensor) {
        if (treatment.scale.defined()) grad.mul_(treatment.scale);
        batches[s.step].push_back({p, grad, s.exp_avg_sq_row, s.exp_avg_sq_col, s.exp_avg_sq});
        continue;
      }
      if (kernel == UpdateKernel::fitsum_cpu) {
        const auto scalars = adafactor_scalars(o, s.step, host_clip_factor(treatment), treatment.zero_after);
        if (p.dim() >= 2) {
          fused_adafactor_matrix_step(p, grad, s.exp_avg_sq_row, s.exp_avg_sq_col, scalars);
        } else {
          fused_adafactor_vector_step(p, grad, s.exp_avg_sq, scalars);
        }
        continue;
      }
      if (treatment.scale.defined()) grad.mul_(treatment.scale);  // clipped in its own dtype, as clip_grad_norm_
      // HF upcasts half-precision parameters and gradients; the state is always fp32.
      const double beta2t = 1.0 - std::pow(static_cast<double>(s.step), o.decay_rate());
      adafactor_tensor_update(p, grad.to(torch::kFloat), s, o, beta2t);
      if (treatment.zero_after) grad.zero_();
    }
    for (const auto& [step, batch] : batches) {
      multi_tensor_adafactor_step(batch, adafactor_scalars(o, step, 1.0, treatment.zero_after));
    }
  }
}

// ---- Construction, state by name, clipping ----

OptimizerType parse_optimizer_type(const std::string& name, const char* field) {
  if (name == "adamw_torch" || name == "adamw_hf" || name == "adamw") return OptimizerType::adamw_torch;
  if (name == "adafactor") return OptimizerType::adafactor;
  throw std::invalid_argument(std::string(field) + " '" + name +
                              "' is not supported (choose adamw_torch, adamw_hf or adafactor)");
}

const char* to_string(OptimizerType type) { return type == OptimizerType::adafactor ? "adafactor" : "adamw_torch"; }

std::vector<std::string> decay_parameter_names(torch::nn::Module& model) {
  std::set<std::string> in_layer_norm;
  // LayerNorms, and T5's RMSNorm, which transformers adds to ALL_LAYERNORM_LAYERS; known by its type name, as optim
  // does not depend on model (model/t5_layers.h).
  const auto is_norm = [](const torch::nn::Module& m) {
    return m.as<torch::nn::LayerNorm>() != nullptr || m.name().find("RMSNorm") != std::string::npos;
  };
  for (const auto& item : model.named_modules()) {
    if (is_norm(*item.value())) {
      for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
        in_layer_norm.insert(item.key().empty() ? p.key() : item.key() + "." + p.key());
      }
    }
  }
  std::vector<std::string> names;
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad() || in_layer_norm.count(item.key())) continue;
    if (item.key().find("bias") != std::string::npos) continue;  // HF: `"bias" not in name`
    names.push_back(item.key());
  }
  return names;
}

NamedTensors trainable_parameters(torch::nn::Module& model) {
  NamedTensors out;
  for (const auto& item : model.named_parameters()) {
    if (item.value().requires_grad()) out.emplace_back(item.key(), item.value());
  }
  return out;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& model, const OptimizerSettings& settings,
                                                        const std::optional<std::set<std::string>>& only,
                                                        const NamedTensors* in_place_of) {
  const auto decay_names = decay_parameter_names(model);
  const std::set<std::string> decay(decay_names.begin(), decay_names.end());
  std::map<std::string, torch::Tensor> replacement;
  if (in_place_of) replacement.insert(in_place_of->begin(), in_place_of->end());
  std::vector<torch::Tensor> with_decay, without_decay;
  for (const auto& [name, p] : trainable_parameters(model)) {
    if (only && !only->count(name)) continue;
    const auto it = replacement.find(name);
    TORCH_CHECK(!in_place_of || it != replacement.end(), "no tensor in place of parameter '", name, "'");
    (decay.count(name) ? with_decay : without_decay).push_back(in_place_of ? it->second : p);
  }
  if (settings.type == OptimizerType::adamw_torch) {
    AdamWOptions base(settings.learning_rate);
    base.beta1(settings.adam_beta1).beta2(settings.adam_beta2).eps(settings.adam_epsilon).fused(settings.fused);
    auto decayed = std::make_unique<AdamWOptions>(base);
    decayed->weight_decay(settings.weight_decay);
    auto plain = std::make_unique<AdamWOptions>(base);
    plain->weight_decay(0.0);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(with_decay, std::move(decayed));
    groups.emplace_back(without_decay, std::move(plain));
    return std::make_unique<AdamW>(std::move(groups), base);
  }
  AdafactorOptions base(settings.learning_rate);
  base.fused(settings.fused);
  auto decayed = std::make_unique<AdafactorOptions>(base);
  decayed->weight_decay(settings.weight_decay);
  auto plain = std::make_unique<AdafactorOptions>(base);
  plain->weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(with_decay, std::move(decayed));
  groups.emplace_back(without_decay, std::move(plain));
  return std::make_unique<Adafactor>(std::move(groups), base);
}

NamedTensors export_optimizer_state(const torch::optim::Optimizer& optimizer, const NamedTensors& parameters) {
  NamedTensors out;
  for (const auto& [name, p] : parameters) {
    const auto it = optimizer.state().find(state_key(p));
    if (it == optimizer.state().end()) continue;  // never stepped (e.g. no gradient yet)
    const auto* named = dynamic_cast<const NamedParamState*>(it->second.get());
    TORCH_CHECK(named != nullptr, "optimizer state of '", name, "' cannot be exported by name");
    named->export_tensors(name, out);
  }
  return out;
}

void import_optimizer_state(torch::optim::Optimizer& optimizer, const NamedTensors& parameters,
                            const std::map<std::string, torch::Tensor>& state) {
  const bool adafactor = dynamic_cast<Adafactor*>(&optimizer) != nullptr;
  for (const auto& [name, p] : parameters) {
    if (!state.count(name + ".step")) continue;
    std::unique_ptr<NamedParamState> s;
    if (adafactor) {
      s = std::make_unique<AdafactorParamState>();
    } else {
      s = std::make_unique<AdamWParamState>();
    }
    s->import_tensors(name, state, p);
    optimizer.state()[state_key(p)] = std::move(s);
  }
}

torch::Tensor gradient_norm(const std::vector<torch::Tensor>& parameters,
                            const std::function<void(torch::Tensor&)>& sum_over_processes) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  for (const auto& p : parameters) {
    if (p.grad().defined()) {
      norms.push_back(p.grad().norm(2).to(torch::kFloat));
    } else if (sum_over_processes) {  // another process's: its norm arrives in the sum
      norms.push_back(torch::zeros({}, p.options().dtype(torch::kFloat)));
    }
  }
  if (norms.empty()) {
    return torch::zeros({}, torch::TensorOptions(torch::kFloat)
                                .device(parameters.empty() ? torch::Device(torch::kCPU) : parameters[0].device()));
  }
  auto stacked = torch::stack(norms);
  // Each parameter's norm is on one process and 0 on the others, so the sum gathers them exactly: the norm is one
  // process's, bit for bit.
  if (sum_over_processes) sum_over_processes(stacked);
  return stacked.norm(2);
}

torch::Tensor clip_factor(const torch::Tensor& norm, double max_norm) {
  if (max_norm <= 0.0) return {};
  // In double, as max_norm / (norm + 1e-6) on the host; a NaN norm compares false and gives 1, as `coef < 1` does.
  const auto options = torch::TensorOptions(torch::kDouble).device(norm.device());
  const auto coef = torch::full({}, max_norm, options).div(norm.to(torch::kDouble).add(1e-6));
  return torch::where(coef.lt(1.0), coef, torch::ones({}, options));
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm,
                             const std::function<void(torch::Tensor&)>& sum_over_processes) {
  torch::NoGradGuard no_grad;
  auto total_norm = gradient_norm(parameters, sum_over_processes);
  const auto coef = clip_factor(total_norm, max_norm);
  if (coef.defined()) {
    for (const auto& p : parameters) {
      if (p.grad().defined()) p.grad().mul_(coef);  // the device multiplies by 1 rather than the host asking
    }
  }
  return total_norm;
}

double host_clip_factor(const GradientTreatment& treatment) {
  if (!treatment.scale.defined()) return 1.0;
  TORCH_CHECK(treatment.scale.device().is_cpu() && treatment.scale.scalar_type() == torch::kDouble,
              "host_clip_factor: the factor of a fused CPU update must be a float64 CPU tensor");
  return *treatment.scale.data_ptr<double>();
}

}  // namespace fitsum::optim
