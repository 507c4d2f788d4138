// fitsum's optimizers: AdamW with torch.optim.AdamW's math and Hugging Face's Adafactor (as optim="adafactor" sets
// it: scale_parameter=False, relative_step=False, beta1=None), as torch::optim::Optimizer subclasses with typed
// options and per-parameter state. State is exported and imported by parameter name (never by position), so a
// checkpoint stays valid when the parameter order changes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "fitsum/optim/multi_tensor_steps.h"

namespace fitsum::optim {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Per-parameter state that can be written and read by name ("<param>.exp_avg", ...).
class NamedParamState : public torch::optim::OptimizerParamState {
 public:
  virtual void export_tensors(const std::string& prefix, NamedTensors& out) const = 0;
  // Throws std::runtime_error naming the missing or mis-shaped entry.
  virtual void import_tensors(const std::string& prefix, const std::map<std::string, torch::Tensor>& in,
                              const torch::Tensor& param) = 0;
};

// How one update treats the accumulated gradients: clipping's factor, applied as each gradient is read (rounding as
// clip_grad_norm's in-place multiply does, bit for bit), and zeroing once they are read. The fused kernels do both
// inside their passes over memory, which saves a read and write of every gradient for the multiply and a write for
// the zeroing; elsewhere the same tensor ops run before and after the update.
// The factor is a 0-dim float64 tensor on the gradients' device (undefined: 1), so that clipping asks the host for
// nothing; the fused kernels, which run on CPU tensors only, read it there (host_clip_factor).
struct GradientTreatment {
  at::Tensor scale;
  bool zero_after = false;
};

// fitsum's optimizers: step() is update({}).
class TreatedUpdate {
 public:
  virtual ~TreatedUpdate() = default;
  virtual void update(const GradientTreatment& treatment) = 0;
};

// ---- AdamW (torch.optim.AdamW, amsgrad=False) ----

struct AdamWOptions : public torch::optim::OptimizerCloneableOptions<AdamWOptions> {
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  TORCH_ARG(double, lr);
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.999;
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 0.0;
  // One multi-threaded pass per parameter (optim/fused_steps.h) where it applies (contiguous float32 on the CPU),
  // at::_fused_adamw_ over the group on other devices (optim/multi_tensor_steps.h); false: the tensor-op formulas.
  // Same results up to float rounding.
  TORCH_ARG(bool, fused) = true;
  TORCH_ARG(UpdatePath, update_path) = UpdatePath::by_device;  // which fused kernels (multi_tensor_steps.h)
  double get_lr() const override { return lr_; }
  void set_lr(const double lr) override { lr_ = lr; }
};

struct AdamWParamState : public NamedParamState {
  std::int64_t step = 0;
  torch::Tensor exp_avg;     // first moment, parameter's shape
  torch::Tensor exp_avg_sq;  // second moment, parameter's shape
  std::unique_ptr<torch::optim::OptimizerParamState> clone() const override {
    return std::make_unique<AdamWParamState>(*this);
  }
  void export_tensors(const std::string& prefix, NamedTensors& out) const override;
  void import_tensors(const std::string& prefix, const std::map<std::string, torch::Tensor>& in,
                      const torch::Tensor& param) override;
};

class AdamW : public torch::optim::Optimizer, public TreatedUpdate {
 public:
  AdamW(std::vector<torch::optim::OptimizerParamGroup> groups, AdamWOptions defaults = AdamWOptions());
  torch::Tensor step(LossClosure closure = nullptr) override;
  void update(const GradientTreatment& treatment) override;
};

// ---- Adafactor (transformers.optimization.Adafactor) ----

struct AdafactorOptions : public torch::optim::OptimizerCloneableOptions<AdafactorOptions> {
  explicit AdafactorOptions(double lr = 1e-3) : lr_(lr) {}
  TORCH_ARG(double, lr);
  TORCH_ARG(double, eps1) = 1e-30;          // added to grad² (HF eps[0])
  TORCH_ARG(double, clip_threshold) = 1.0;  // the update's RMS is clipped to this
  TORCH_ARG(double, decay_rate) = -0.8;     // beta2_t = 1 - t^decay_rate
  TORCH_ARG(double, weight_decay) = 0.0;
  // Three passes over the gradient per parameter, no temporaries (optim/fused_steps.h) where it applies
  // (contiguous float32 matrices and vectors on the CPU), foreach kernels over the group on other devices
  // (optim/multi_tensor_steps.h); false: the tensor-op formulas.
  TORCH_ARG(bool, fused) = true;
  TORCH_ARG(UpdatePath, update_path) = UpdatePath::by_device;  // which fused kernels (multi_tensor_steps.h)
  double get_lr() const override { return lr_; }
  void set_lr(const double lr) override { lr_ = lr; }
};

struct AdafactorParamState : public NamedParamState {
  std::int64_t step = 0;
  torch::Tensor exp_avg_sq_row;  // matrices: mean of grad² over the last dim   (..., rows)
  torch::Tensor exp_avg_sq_col;  // matrices: mean of grad² over the row dim    (..., cols)
  torch::Tensor exp_avg_sq;      // vectors: full second moment
  std::unique_ptr<torch::optim::OptimizerParamState> clone() const override {
    return std::make_unique<AdafactorParamState>(*this);
  }
  void export_tensors(const std::string& prefix, NamedTensors& out) const override;
  void import_tensors(const std::string& prefix, const std::map<std::string, torch::Tensor>& in,
                      const torch::Tensor& param) override;
};

class Adafactor : public torch::optim::Optimizer, public TreatedUpdate {
 public:
  Adafactor(std::vector<torch::optim::OptimizerParamGroup> groups, AdafactorOptions defaults = AdafactorOptions());
  torch::Tensor step(LossClosure closure = nullptr) override;
  void update(const GradientTreatment& treatment) override;
};

// ---- Building them as the HF Trainer does ----

enum class OptimizerType { adamw_torch, adafactor };
// HF's `optim` names: "adamw_torch" (and its aliases "adamw_hf", "adamw"), "adafactor"; throws
// std::invalid_argument naming `field` and listing the choices.
OptimizerType parse_optimizer_type(const std::string& name, const char* field = "optim");
const char* to_string(OptimizerType type);

struct OptimizerSettings {
  OptimizerType type = OptimizerType::adamw_torch;
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  bool fused = true;  // the fused kernels where they apply (AdamWOptions::fused, AdafactorOptions::fused)
};

// The Trainer's rule (get_decay_parameter_names): weight decay for every trainable parameter except biases and
// the parameters of LayerNorm modules.
std::vector<std::string> decay_parameter_names(torch::nn::Module& model);

// The trainable parameters of `model` with their names (requires_grad only).
NamedTensors trainable_parameters(torch::nn::Module& model);

// Two groups, decay and no decay, over the trainable parameters; with `only`, over those of them it names (a
// process's share under ZeRO stage 1, sharding.h). With `in_place_of`, the optimizer updates those tensors instead
// of the model's parameters of the same names (the host copies of an offloaded optimizer, train/optimizer_offload.h).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& model, const OptimizerSettings& settings,
                                                        const std::optional<std::set<std::string>>& only = {},
                                                        const NamedTensors* in_place_of = nullptr);

// Name-keyed optimizer state for checkpoints: "<param name>.<state>" -> tensor (step counters as int64 scalars).
NamedTensors export_optimizer_state(const torch::optim::Optimizer& optimizer, const NamedTensors& parameters);
// The inverse; creates the state of every parameter found. Throws std::runtime_error naming what does not fit.
void import_optimizer_state(torch::optim::Optimizer& optimizer, const NamedTensors& parameters,
                            const std::map<std::string, torch::Tensor>& state);

// torch.nn.utils.clip_grad_norm_: the L2 norm of all gradients together (returned, before clipping, as a 0-dim
// float32 tensor on the gradients' device: nothing is read back to the host); when above max_norm every gradient is
// scaled by max_norm / (norm + 1e-6). max_norm <= 0 only measures. With
// `sum_over_processes` (ZeRO stage 2, where each process holds the gradients of its own parameters only) the norm is
// of every process's gradients: the per-parameter norms, 0 where a process has no gradient, are summed over the
// processes (an exact gather), so it equals one process's norm.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm,
                             const std::function<void(torch::Tensor&)>& sum_over_processes = {});

// clip_grad_norm's two halves: the norm (nothing scaled), and the factor it scales by (1 when the norm is within
// max_norm or not a number; undefined, meaning 1, when max_norm <= 0), computed in float64 on the norm's device.
torch::Tensor gradient_norm(const std::vector<torch::Tensor>& parameters,
                            const std::function<void(torch::Tensor&)>& sum_over_processes = {});
torch::Tensor clip_factor(const torch::Tensor& norm, double max_norm);
// The factor as a double, for the fused CPU kernels (a CPU tensor's value: no device to wait for).
double host_clip_factor(const GradientTreatment& treatment);

}  // namespace fitsum::optim
