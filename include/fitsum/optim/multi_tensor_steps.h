// Optimizer updates of many tensors at once, for devices where one kernel launch per tensor and operation costs more
// than the arithmetic (CUDA): AdamW through LibTorch's fused multi-tensor kernel (at::_fused_adamw_, LibTorch >= 2.4,
// which has CUDA and CPU kernels; torch.optim.AdamW(fused=True)) or, before it, torch.optim.AdamW's foreach
// formulation; HF's Adafactor with the element-wise passes as at::_foreach_* ops over all tensors and only the
// factored means and RMS reductions per tensor. The arithmetic is that of the tensor-op formulas in optimizers.cpp,
// the order of summation inside means and norms aside. And the rule that picks, per parameter, between these, fitsum's
// fused CPU kernels (fused_steps.h) and the tensor-op formulas.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include "fitsum/optim/fused_steps.h"

namespace fitsum::optim {

// Which implementation updates a parameter.
enum class UpdateKernel {
  tensor_ops,    // the reference formulas, one tensor op at a time (any dtype, layout and device)
  fitsum_cpu,    // fitsum's fused CPU kernels (fused_steps.h): contiguous float32 matrices and vectors on the CPU
  multi_tensor,  // a group's parameters together (this header): contiguous float32 on one device
};

// How an optimizer picks (AdamWOptions::update_path, AdafactorOptions::update_path): by the parameters' device (the
// CPU keeps fitsum's fused kernels, tuned for it; other devices, CUDA, take the multi-tensor kernels), or the
// multi-tensor kernels on every device (to check them against the CPU kernels where no GPU is at hand).
enum class UpdatePath { by_device, multi_tensor };

// The kernel for `param` and its gradient: the tensor ops unless `fused`; otherwise by `path` as above, falling back
// to the tensor ops where the chosen kernel does not apply (another dtype, a non-contiguous or sparse tensor).
UpdateKernel choose_update_kernel(const at::Tensor& param, const at::Tensor& grad, bool fused, UpdatePath path);

// One parameter of a multi-tensor AdamW update, all of one device, contiguous float32.
struct AdamWTensors {
  at::Tensor param, grad, exp_avg, exp_avg_sq;
};

// One parameter of a multi-tensor Adafactor update: factored (dim >= 2) with row (..., rows) and col (..., cols),
// or with the full second moment `full` of the parameter's shape.
struct AdafactorTensors {
  at::Tensor param, grad, row, col, full;
};

// Updates every tensor of `batch` in place with the same scalars (one parameter group, one step count): the
// gradient is scaled by s.grad_scale first (clipping, as clip_grad_norm_'s in-place multiply) and zeroed after when
// s.zero_grad. Temporaries are bounded by working through the batch in chunks of a few MiB (a tensor larger than
// that alone). No host synchronisation: every scalar that depends on the data stays on the device.
void multi_tensor_adamw_step(const std::vector<AdamWTensors>& batch, const AdamWStepScalars& s);
void multi_tensor_adafactor_step(const std::vector<AdafactorTensors>& batch, const AdafactorStepScalars& s);

}  // namespace fitsum::optim
