// Implements include/fitsum/model/lora.h.
#include "fitsum/model/lora.h"

#include <cmath>
#include <stdexcept>

#include <torch/torch.h>

#include "fitsum/kernels/dropout.h"
#include "fitsum/kernels/few_rows_linear.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/util/strings.h"

namespace fitsum::model {

namespace {

bool ends_with_component(const std::string& name, const std::string& suffix) {
  if (name == suffix) return true;
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         name[name.size() - suffix.size() - 1] == '.';
}

using util::ends_with;

bool is_adapter_part(const std::string& name) {
  return name.find(".lora_A") != std::string::npos || name.find(".lora_B") != std::string::npos ||
         name.find(".lora_dropout") != std::string::npos;
}

// The Linear layers of `model` by qualified name, adapters' own excluded.
std::vector<std::pair<std::string, torch::nn::Linear>> linear_layers(Seq2SeqLMImpl& model) {
  std::vector<std::pair<std::string, torch::nn::Linear>> out;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    if (is_adapter_part(item.key())) continue;
    if (auto linear = std::dynamic_pointer_cast<torch::nn::LinearImpl>(item.value())) {
      out.emplace_back(item.key(), torch::nn::Linear(linear));
    }
  }
  return out;
}

std::string joined_names(const std::vector<std::pair<std::string, torch::nn::Linear>>& layers) {
  // The distinct last components ("q_proj, k_proj, ..."): what a user writes in target_modules.
  std::vector<std::string> seen;
  for (const auto& [name, layer] : layers) {
    const auto last = name.substr(name.rfind('.') + 1);
    if (std::find(seen.begin(), seen.end(), last) == seen.end()) seen.push_back(last);
  }
  std::string out;
  for (const auto& s : seen) out += (out.empty() ? "" : ", ") + s;
  return out;
}

bool targets_all_linear(const LoraConfig& config) {
  return config.target_modules.size() == 1 && config.target_modules[0] == "all-linear";
}

// PEFT's defaults for these families (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING): the query and value
// projections, under each layout's names.
std::vector<std::string> default_targets(const std::vector<std::pair<std::string, torch::nn::Linear>>& layers) {
  for (const auto& [name, layer] : layers) {
    if (ends_with_component(name, "q_proj")) return {"q_proj", "v_proj"};
  }
  return {"q", "v"};
}

void init_lora_a(torch::Tensor& weight, torch::Generator& generator) {
  // kaiming_uniform_(a = sqrt(5)) on a (r, in) matrix: bound = sqrt(6 / ((1 + a^2) in)) = 1 / sqrt(in).
  const double bound = 1.0 / std::sqrt(static_cast<double>(weight.size(1)));
  torch::NoGradGuard no_grad;
  weight.uniform_(-bound, bound, generator);
}

}  // namespace

const char* lora_bias_name(LoraBias bias) {
  switch (bias) {
    case LoraBias::all:
      return "all";
    case LoraBias::lora_only:
      return "lora_only";
    case LoraBias::none:
      break;
  }
  return "none";
}

LoraBias parse_lora_bias(const std::string& name) {
  if (name == "none") return LoraBias::none;
  if (name == "all") return LoraBias::all;
  if (name == "lora_only") return LoraBias::lora_only;
  throw std::invalid_argument("lora bias '" + name + "' is not one of none, all, lora_only");
}

double LoraConfig::scaling() const {
  return use_rslora ? lora_alpha / std::sqrt(static_cast<double>(r)) : lora_alpha / static_cast<double>(r);
}

void LoraConfig::validate() const {
  if (r < 0) throw std::invalid_argument("lora r must be a positive integer, got " + std::to_string(r));
  if (!std::isfinite(lora_alpha)) throw std::invalid_argument("lora_alpha must be a finite number");
  if (!(lora_dropout >= 0.0 && lora_dropout < 1.0)) {
    throw std::invalid_argument("lora_dropout must be in [0, 1), got " + std::to_string(lora_dropout));
  }
  for (const auto& t : target_modules) {
    if (t.empty()) throw std::invalid_argument("lora target_modules has an empty name");
    if (t == "all-linear" && target_modules.size() > 1) {
      throw std::invalid_argument(
          "lora target_modules: all-linear stands alone (PEFT takes it only as the whole value)");
    }
  }
}

LoraAdapter lora_adapter_of(const torch::nn::LinearImpl& layer) {
  LoraAdapter adapter;
  const auto children = layer.named_children();
  if (children.is_empty()) return adapter;
  if (const auto* a = children.find("lora_A")) {
    adapter.lora_A = torch::nn::Linear(std::dynamic_pointer_cast<torch::nn::LinearImpl>(*a));
  }
  if (const auto* b = children.find("lora_B")) {
    adapter.lora_B = torch::nn::Linear(std::dynamic_pointer_cast<torch::nn::LinearImpl>(*b));
  }
  if (const auto* s = children.find("lora_dropout")) {
    adapter.settings = LoraSettings(std::dynamic_pointer_cast<LoraSettingsImpl>(*s));
  }
  if (adapter.lora_A.is_empty() || adapter.lora_B.is_empty() || adapter.settings.is_empty()) return LoraAdapter{};
  return adapter;
}

at::Tensor add_lora(const at::Tensor& y, const at::Tensor& x, const LoraAdapter& adapter, bool training) {
  const auto& s = *adapter.settings;
  const auto input = s.dropout > 0.0 ? kernels::dropout(x, s.dropout, training) : x;
  const auto down = kernels::linear(input, adapter.lora_A->weight, {}, training);
  const auto up = kernels::linear(down, adapter.lora_B->weight, {}, training);
  return y.add(up, s.scaling);  // PEFT: result + lora_B(lora_A(dropout(x))) * scaling
}

at::Tensor project(const torch::nn::Linear& layer, const at::Tensor& x) {
  auto y = kernels::linear(x, layer->weight, layer->bias, layer->is_training());
  if (const auto adapter = lora_adapter_of(*layer)) return add_lora(y, x, adapter, layer->is_training());
  return y;
}

std::vector<std::string> lora_target_names(Seq2SeqLMImpl& model, const LoraConfig& config) {
  const auto layers = linear_layers(model);
  const auto targets = config.target_modules.empty() ? default_targets(layers) : config.target_modules;
  std::vector<std::string> names;
  for (const auto& [name, layer] : layers) {
    if (targets_all_linear(config)) {
      if (name != "lm_head") names.push_back(name);  // PEFT's all-linear leaves the output layer out
      continue;
    }
    for (const auto& t : targets) {
      if (ends_with_component(name, t)) {
        names.push_back(name);
        break;
      }
    }
  }
  // PEFT refuses a target that names a module it cannot adapt; here that is every module that is not a Linear.
  if (!targets_all_linear(config)) {
    for (const auto& item : model.named_modules("", false)) {
      if (is_adapter_part(item.key()) || std::dynamic_pointer_cast<torch::nn::LinearImpl>(item.value())) continue;
      for (const auto& t : targets) {
        if (ends_with_component(item.key(), t) && !item.value()->children().empty()) continue;
        if (ends_with_component(item.key(), t)) {
          throw std::invalid_argument("lora target_modules: '" + t + "' names " + item.key() +
                                      ", which is not a Linear layer (adaptable layers: " + joined_names(layers) + ")");
        }
      }
    }
  }
  if (names.empty()) {
    std::string given;
    for (const auto& t : targets) given += (given.empty() ? "" : ",") + t;
    throw std::invalid_argument("lora target_modules " + given +
                                " match no layer of the model (its Linear layers: " + joined_names(layers) + ")");
  }
  return names;
}

void apply_lora(Seq2SeqLMImpl& model, const LoraConfig& config, std::uint64_t seed) {
  config.validate();
  if (!config.enabled()) throw std::invalid_argument("lora r must be at least 1 to add adapters");
  if (has_lora(model)) throw std::invalid_argument("the model already has LoRA adapters");
  const auto targets = lora_target_names(model, config);
  for (auto& p : model.parameters()) p.set_requires_grad(false);
  auto generator = at::detail::createCPUGenerator(seed);
  const auto modules = model.named_modules("", false);
  for (const auto& name : targets) {
    auto layer = std::dynamic_pointer_cast<torch::nn::LinearImpl>(modules[name]);
    const auto in = layer->weight.size(1);
    const auto out = layer->weight.size(0);
    auto options = torch::TensorOptions().dtype(torch::kFloat32).device(layer->weight.device());
    torch::nn::Linear a(torch::nn::LinearOptions(in, config.r).bias(false));
    torch::nn::Linear b(torch::nn::LinearOptions(config.r, out).bias(false));
    a->to(options.device());
    b->to(options.device());
    init_lora_a(a->weight, generator);
    {
      torch::NoGradGuard no_grad;
      b->weight.zero_();
    }
    a->train(layer->is_training());
    b->train(layer->is_training());
    layer->register_module("lora_A", a);
    layer->register_module("lora_B", b);
    layer->register_module("lora_dropout", LoraSettings(config.scaling(), config.lora_dropout));
    if (config.bias == LoraBias::lora_only && layer->bias.defined()) layer->bias.set_requires_grad(true);
  }
  if (config.bias == LoraBias::all) {
    for (auto& item : model.named_parameters()) {
      if (ends_with(item.key(), ".bias")) item.value().set_requires_grad(true);
    }
  }
  for (const auto& m : config.modules_to_save) {
    bool found = false;
    for (const auto& item : model.named_modules("", false)) {
      if (is_adapter_part(item.key()) || !ends_with(item.key(), m)) continue;
      found = true;
      for (auto& p : item.value()->parameters()) p.set_requires_grad(true);
    }
    if (!found) throw std::invalid_argument("lora modules_to_save: '" + m + "' names no module of the model");
  }
}

bool has_lora(Seq2SeqLMImpl& model) {
  for (const auto& [name, layer] : linear_layers(model)) {
    if (lora_adapter_of(*layer)) return true;
  }
  return false;
}

std::vector<std::pair<std::string, at::Tensor>> lora_state(Seq2SeqLMImpl& model, const LoraConfig& config) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model.named_parameters()) {
    const auto& name = item.key();
    const bool adapter = ends_with(name, ".lora_A.weight") || ends_with(name, ".lora_B.weight");
    const bool bias = config.bias != LoraBias::none && ends_with(name, ".bias") && item.value().requires_grad();
    bool saved_module = false;
    for (const auto& m : config.modules_to_save) {
      const auto owner = name.substr(0, name.rfind('.'));
      if (ends_with(owner, m)) saved_module = true;
    }
    if (adapter || bias || saved_module) out.emplace_back(name, item.value());
  }
  return out;
}

void merge_lora(Seq2SeqLMImpl& model) {
  torch::NoGradGuard no_grad;
  for (auto& [name, layer] : linear_layers(model)) {
    const auto adapter = lora_adapter_of(*layer);
    if (!adapter) continue;
    const auto delta = torch::mm(adapter.lora_B->weight, adapter.lora_A->weight) * adapter.settings->scaling;
    auto merged = layer->weight.to(torch::kFloat32) + delta;
    layer->weight.set_data(merged);
    layer->unregister_module("lora_A");
    layer->unregister_module("lora_B");
    layer->unregister_module("lora_dropout");
  }
  for (auto& p : model.parameters()) p.set_requires_grad(true);
}

std::int64_t hold_frozen_linears_in_bfloat16(Seq2SeqLMImpl& model) {
  std::int64_t saved = 0;
  for (auto& [name, layer] : linear_layers(model)) {
    if (name == "lm_head" || layer->weight.requires_grad() || layer->weight.scalar_type() != torch::kFloat32) continue;
    torch::NoGradGuard no_grad;
    layer->weight.set_data(layer->weight.to(torch::kBFloat16));
    saved += layer->weight.numel() * 2;
  }
  return saved;
}

}  // namespace fitsum::model
