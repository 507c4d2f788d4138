// Low-rank adapters (LoRA) as PEFT builds them (peft.tuners.lora): a targeted Linear layer computes
//   y = W x + b + scaling * B (A dropout(x)),   A (r, in), B (out, r),   scaling = alpha / r  (alpha / sqrt(r) rsLoRA)
// with W and b frozen. The adapter's two products are registered under the Linear as `lora_A` and `lora_B` (Linear
// modules without bias), so parameter names are PEFT's saved keys without their `base_model.model.` prefix:
// "model.encoder.layers.0.self_attn.q_proj.lora_A.weight". A third child, `lora_dropout`, holds no tensor; it
// carries the adapter's scaling and dropout. Model code reaches adapters only through `project`
// (few_rows_linear.h), which adds them: the model's structure does not change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace fitsum::model {

class Seq2SeqLMImpl;

// PEFT's LoraConfig.bias: which biases train beside the adapters (and are saved with them).
enum class LoraBias { none, all, lora_only };
const char* lora_bias_name(LoraBias bias);
LoraBias parse_lora_bias(const std::string& name);  // "none" | "all" | "lora_only", else throws

// PEFT's LoraConfig fields, under its names and defaults. r = 0 means no adapters (full fine-tuning).
struct LoraConfig {
  std::int64_t r = 0;
  double lora_alpha = 8.0;
  double lora_dropout = 0.0;
  // Module names or name suffixes ("q_proj", "v_proj"; "q", "v" for T5), matched as PEFT matches a list: a module
  // whose qualified name equals an entry or ends with "." + entry. {"all-linear"}: every Linear but the output layer.
  // Empty: the family's default (PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: q_proj, v_proj / q, v).
  std::vector<std::string> target_modules;
  LoraBias bias = LoraBias::none;
  std::vector<std::string> modules_to_save;  // trained in full and saved with the adapter
  bool use_rslora = false;

  bool enabled() const { return r > 0; }
  double scaling() const;  // lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora
  // Throws std::invalid_argument naming the field (r, lora_alpha, lora_dropout) for values PEFT would refuse.
  void validate() const;
};

// The tensorless third child of an adapted Linear: the adapter's scaling and input dropout.
class LoraSettingsImpl : public torch::nn::Module {
 public:
  LoraSettingsImpl(double scaling, double dropout) : scaling(scaling), dropout(dropout) {}
  double scaling;
  double dropout;
};
TORCH_MODULE(LoraSettings);

// The adapter of a Linear layer, or all-null members when it has none.
struct LoraAdapter {
  torch::nn::Linear lora_A{nullptr};
  torch::nn::Linear lora_B{nullptr};
  LoraSettings settings{nullptr};
  explicit operator bool() const { return !lora_A.is_empty(); }
};
LoraAdapter lora_adapter_of(const torch::nn::LinearImpl& layer);

// What `project` adds to a layer's output y = W x + b: y + scaling * B(A(dropout(x))). `training` as the layer's.
at::Tensor add_lora(const at::Tensor& y, const at::Tensor& x, const LoraAdapter& adapter, bool training);

// layer->forward(x) through kernels::linear (kernels/few_rows_linear.h), in the layer's mode, plus the layer's LoRA
// adapter where it has one.
at::Tensor project(const torch::nn::Linear& layer, const at::Tensor& x);

// The qualified names ("model.encoder.layers.0.self_attn.q_proj") of the Linear layers `config` targets in
// `model`, in registration order. Throws std::invalid_argument when an entry of target_modules or modules_to_save
// matches no module (PEFT's "Target modules ... not found in the base model"), naming the entry and the model's
// Linear names as a hint.
std::vector<std::string> lora_target_names(Seq2SeqLMImpl& model, const LoraConfig& config);

// Adds adapters to the targeted layers and freezes everything else (requires_grad false), as
// get_peft_model(model, config) does: A initialised as PEFT's default (kaiming_uniform_(a = sqrt(5)), i.e.
// U(-1/sqrt(in), 1/sqrt(in))), B zero, from a generator seeded with `seed`; then the biases `config.bias` names and
// the parameters of modules_to_save are made trainable again. The adapters are float32 on the base's device.
void apply_lora(Seq2SeqLMImpl& model, const LoraConfig& config, std::uint64_t seed);

// Whether any layer of `model` has an adapter.
bool has_lora(Seq2SeqLMImpl& model);

// The tensors an adapter file holds, under the model's parameter names (PEFT's keys without "base_model.model."):
// every lora_A / lora_B weight, the biases config.bias trains, and modules_to_save's parameters.
std::vector<std::pair<std::string, at::Tensor>> lora_state(Seq2SeqLMImpl& model, const LoraConfig& config);

// merge_and_unload: W += scaling * B A for every adapted layer, then the adapters are removed and every parameter
// requires a gradient again. The model then computes what it computed with the adapters (up to float rounding).
void merge_lora(Seq2SeqLMImpl& model);

// Holds the frozen (requires_grad false) weights of the targeted-or-not Linear layers of the stacks in bfloat16
// (`--base_dtype bfloat16`): products convert them to float32 as they run (kernels/onednn_linear.h's dense_linear saves
// the bfloat16 weight for backward, never a float32 copy). Trainable tensors, embeddings, norms and biases stay
// float32. Returns the bytes saved.
std::int64_t hold_frozen_linears_in_bfloat16(Seq2SeqLMImpl& model);

}  // namespace fitsum::model
