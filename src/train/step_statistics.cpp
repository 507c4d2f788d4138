// Implements include/fitsum/train/step_statistics.h.
#include "fitsum/train/step_statistics.h"

#include <torch/torch.h>

#include "fitsum/util/device_reads.h"

namespace fitsum::train {

namespace {
enum Field : std::int64_t { kLossSinceLog, kTotalLoss, kLastGradNorm, kBadStep, kBadLoss, kBadGradNorm, kFields };
}

void StepStatistics::start(const c10::Device& device, double loss_since_log, double total_loss,
                           double last_grad_norm) {
  // A host-to-device copy: nothing waits for the device.
  state_ = torch::tensor({loss_since_log, total_loss, last_grad_norm, 0.0, 0.0, 0.0}, torch::kDouble).to(device);
  unread_ = false;
}

void StepStatistics::add(std::int64_t step, const torch::Tensor& loss, const torch::Tensor& grad_norm) {
  torch::NoGradGuard no_grad;
  const auto l = loss.detach().to(torch::kDouble).reshape({});
  const auto n = grad_norm.detach().to(torch::kDouble).reshape({});
  state_[kLossSinceLog].add_(l);
  state_[kTotalLoss].add_(l);
  state_[kLastGradNorm].copy_(n);
  // The first non-finite step only: later ones (trained on from a NaN model) would hide where it began.
  const auto finite = torch::isfinite(l).logical_and(torch::isfinite(n));
  const auto first = state_[kBadStep].eq(0.0).logical_and(finite.logical_not());
  const auto bad = torch::stack({torch::full({}, static_cast<double>(step), l.options()), l, n});
  auto slot = state_.narrow(0, kBadStep, 3);
  slot.copy_(torch::where(first, bad, slot));
  unread_ = true;
}

StepStatistics::Values StepStatistics::read() {
  const auto host = util::read_to_host(state_).contiguous();
  const auto* v = host.data_ptr<double>();
  unread_ = false;
  Values out;
  out.loss_since_log = v[kLossSinceLog];
  out.total_loss = v[kTotalLoss];
  out.last_grad_norm = v[kLastGradNorm];
  out.non_finite_step = static_cast<std::int64_t>(v[kBadStep]);
  out.non_finite_loss = v[kBadLoss];
  out.non_finite_grad_norm = v[kBadGradNorm];
  return out;
}

void StepStatistics::reset_since_log() { state_[kLossSinceLog].zero_(); }

}  // namespace fitsum::train
