// Implements include/fitsum/optim/multi_tensor_steps.h. Each formula follows the tensor-op version in optimizers.cpp
// (and through it torch.optim.AdamW / transformers' Adafactor) operation by operation; only the kernels differ.
#include "fitsum/optim/multi_tensor_steps.h"

#include <cmath>
#include <cstddef>

#include <ATen/ATen.h>

#include "fitsum/util/torch_compat.h"

namespace fitsum::optim {

namespace {

// Adafactor's temporaries (the squared gradients, the updates) live for one chunk of parameters at a time, so the
// step adds at most about twice this (or twice the largest tensor) to the memory the parameters need.
constexpr std::int64_t kChunkBytes = std::int64_t{32} << 20;

// Calls `update(first, last)` for consecutive ranges of `batch` of at most kChunkBytes of parameters each.
template <typename Tensors, typename Update>
void for_each_chunk(const std::vector<Tensors>& batch, Update update) {
  std::size_t first = 0;
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto size = static_cast<std::int64_t>(batch[i].param.nbytes());
    if (i > first && bytes + size > kChunkBytes) {
      update(first, i);
      first = i;
      bytes = 0;
    }
    bytes += size;
  }
  if (first < batch.size()) update(first, batch.size());
}

void adamw_chunk(std::vector<at::Tensor>& params, std::vector<at::Tensor>& grads, std::vector<at::Tensor>& exp_avgs,
                 std::vector<at::Tensor>& exp_avg_sqs, const AdamWStepScalars& s) {
  if (s.grad_scale != 1.0) at::_foreach_mul_(grads, s.grad_scale);
#if FITSUM_HAS_FUSED_ADAMW
  // torch.optim.AdamW(fused=True): decoupled decay p *= 1 - lr * wd, the moments, bias corrections 1 - beta^step,
  // p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps). The step counts (already incremented, as torch passes them) as
  // float32 tensors on the parameters' device, filled in one kernel.
  const auto steps = at::full({static_cast<std::int64_t>(params.size())}, static_cast<double>(s.step),
                              params.front().options().dtype(at::kFloat))
                         .unbind(0);
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, s.lr, s.beta1, s.beta2,
                    s.weight_decay, s.eps, /*amsgrad=*/false, /*maximize=*/false);
#else
  // torch.optim.AdamW(foreach=True)'s formulation.
  if (s.weight_decay != 0.0) at::_foreach_mul_(params, 1.0 - s.lr * s.weight_decay);
  at::_foreach_mul_(exp_avgs, s.beta1);
  at::_foreach_add_(exp_avgs, grads, 1.0 - s.beta1);
  at::_foreach_mul_(exp_avg_sqs, s.beta2);
  at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1.0 - s.beta2);
  const double bias_correction1 = 1.0 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(s.beta2, static_cast<double>(s.step));
  auto denom = at::_foreach_sqrt(exp_avg_sqs);
  at::_foreach_div_(denom, std::sqrt(bias_correction2));
  at::_foreach_add_(denom, s.eps);
  at::_foreach_addcdiv_(params, exp_avgs, denom, -(s.lr / bias_correction1));
#endif
  if (s.zero_grad) at::_foreach_zero_(grads);
}

// HF Adafactor's second moments: state = state * beta2t + (1 - beta2t) * mean, where the means of grad^2 + eps1
// are over each row and column (factored) or the squares themselves.
void decay_second_moments(const AdafactorTensors* batch, std::size_t count, const std::vector<at::Tensor>& grads,
                          const AdafactorStepScalars& s) {
  auto squares = at::_foreach_mul(grads, grads);
  at::_foreach_add_(squares, s.eps1);
  std::vector<at::Tensor> moments, means;
  for (std::size_t i = 0; i < count; ++i) {
    if (batch[i].row.defined()) {
      moments.insert(moments.end(), {batch[i].row, batch[i].col});
      means.insert(means.end(), {squares[i].mean(-1), squares[i].mean(-2)});
    } else {
      moments.push_back(batch[i].full);
      means.push_back(squares[i]);
    }
  }
  at::_foreach_mul_(moments, s.beta2t);
  at::_foreach_add_(moments, means, 1.0 - s.beta2t);
}

void adafactor_chunk(const AdafactorTensors* batch, std::size_t count, const AdafactorStepScalars& s) {
  std::vector<at::Tensor> params, grads;
  for (std::size_t i = 0; i < count; ++i) {
    params.push_back(batch[i].param);
    grads.push_back(batch[i].grad);
  }
  if (s.grad_scale != 1.0) at::_foreach_mul_(grads, s.grad_scale);
  decay_second_moments(batch, count, grads, s);
  // HF _approx_sq_grad: (row / mean(row)).rsqrt() (x) col.rsqrt(), or the full moment's rsqrt; times the gradient.
  std::vector<at::Tensor> updates;
  for (std::size_t i = 0; i < count; ++i) {
    const auto& t = batch[i];
    if (t.row.defined()) {
      const auto r_factor = (t.row / t.row.mean(-1, /*keepdim=*/true)).rsqrt_().unsqueeze(-1);
      updates.push_back(at::mul(r_factor, t.col.unsqueeze(-2).rsqrt()));
    } else {
      updates.push_back(t.full.rsqrt());
    }
  }
  at::_foreach_mul_(updates, grads);
  // update /= max(1, rms(update) / clip_threshold), rms = ||update|| / sqrt(numel): the norms stay on the device.
  const auto norms = at::_foreach_norm(updates);
  for (std::size_t i = 0; i < count; ++i) {
    const double root_numel = std::sqrt(static_cast<double>(updates[i].numel()));
    updates[i].div_((norms[i] / root_numel / s.clip_threshold).clamp_(1.0));
  }
  at::_foreach_mul_(updates, s.lr);
  if (s.weight_decay != 0.0) at::_foreach_add_(params, params, -s.weight_decay * s.lr);
  at::_foreach_sub_(params, updates);
  if (s.zero_grad) at::_foreach_zero_(grads);
}

}  // namespace

UpdateKernel choose_update_kernel(const at::Tensor& param, const at::Tensor& grad, bool fused, UpdatePath path) {
  if (!fused) return UpdateKernel::tensor_ops;
  if (path == UpdatePath::by_device && param.device().is_cpu()) {
    return fused_step_applies(param, grad) ? UpdateKernel::fitsum_cpu : UpdateKernel::tensor_ops;
  }
  const bool applies = param.scalar_type() == at::kFloat && grad.scalar_type() == at::kFloat &&
                       param.layout() == at::kStrided && grad.layout() == at::kStrided &&
                       param.device() == grad.device() && param.is_contiguous() && grad.is_contiguous();
  return applies ? UpdateKernel::multi_tensor : UpdateKernel::tensor_ops;
}

void multi_tensor_adamw_step(const std::vector<AdamWTensors>& batch, const AdamWStepScalars& s) {
  for_each_chunk(batch, [&](std::size_t first, std::size_t last) {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    for (std::size_t i = first; i < last; ++i) {
      params.push_back(batch[i].param);
      grads.push_back(batch[i].grad);
      exp_avgs.push_back(batch[i].exp_avg);
      exp_avg_sqs.push_back(batch[i].exp_avg_sq);
    }
    adamw_chunk(params, grads, exp_avgs, exp_avg_sqs, s);
  });
}

void multi_tensor_adafactor_step(const std::vector<AdafactorTensors>& batch, const AdafactorStepScalars& s) {
  for_each_chunk(batch,
                 [&](std::size_t first, std::size_t last) { adafactor_chunk(batch.data() + first, last - first, s); });
}

}  // namespace fitsum::optim
