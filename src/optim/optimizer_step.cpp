// Implements include/fitsum/optim/optimizer_step.h.
#include "fitsum/optim/optimizer_step.h"

#include "fitsum/optim/optimizers.h"
#include "fitsum/util/threads.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::optim {

void zero_gradients(torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  }
}

double optimizer_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& parameters,
                      const UpdateOptions& options) {
  util::IntraOpThreadsGuard threads(options.threads);
  const double norm = gradient_norm(parameters, options.sum_over_processes);
  const double factor = clip_factor(norm, options.max_grad_norm);
  if (auto* treated = dynamic_cast<TreatedUpdate*>(&optimizer)) {
    treated->update({factor, /*zero_after=*/true});
    return norm;
  }
  torch::NoGradGuard no_grad;
  if (factor != 1.0) {
    for (const auto& p : parameters) {
      if (p.grad().defined()) p.grad().mul_(factor);
    }
  }
  optimizer.step();
  zero_gradients(optimizer);
  return norm;
}

}  // namespace fitsum::optim
