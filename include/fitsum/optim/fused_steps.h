// One optimizer update of one float32 tensor in a few passes over memory, with no temporaries the size of the
// parameter: the element loops of AdamW and Adafactor (optim/optimizers.h) written out, multi-threaded with
// at::parallel_for. The arithmetic follows the reference formulas step by step in float32; sums are taken in double
// over a fixed partition of the tensor, so results do not depend on the number of threads.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace fitsum::optim {

struct AdamWStepScalars {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  std::int64_t step = 1;  // after incrementing
  double grad_scale = 1.0;  // the gradient is read as grad * float(grad_scale): clip_grad_norm's factor, bit for bit
  bool zero_grad = false;   // grad is left zeroed (the next step's accumulation starts from it)
};

// param, grad, exp_avg, exp_avg_sq: contiguous float32 tensors of one shape; updated in place (grad only when
// s.zero_grad).
void fused_adamw_step(at::Tensor& param, at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                      const AdamWStepScalars& s);

struct AdafactorStepScalars {
  double lr = 1e-3;
  double beta2t = 0.0;  // 1 - step^decay_rate
  double eps1 = 1e-30;
  double clip_threshold = 1.0;
  double weight_decay = 0.0;
  double grad_scale = 1.0;  // as in AdamWStepScalars
  bool zero_grad = false;
};

// Factored second moment: param and grad (R, C) contiguous float32; row_state (R), col_state (C).
void fused_adafactor_matrix_step(at::Tensor& param, at::Tensor& grad, at::Tensor& row_state, at::Tensor& col_state,
                                 const AdafactorStepScalars& s);

// Full second moment: param, grad and state of one shape, contiguous float32.
void fused_adafactor_vector_step(at::Tensor& param, at::Tensor& grad, at::Tensor& state, const AdafactorStepScalars& s);

// True when the fused kernels can update `param` with `grad` (both float32, contiguous, on the CPU).
bool fused_step_applies(const at::Tensor& param, const at::Tensor& grad);

}  // namespace fitsum::optim
