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
  const double norm = clip_grad_norm(parameters, options.max_grad_norm, options.sum_over_processes);
  optimizer.step();
  zero_gradients(optimizer);
  return norm;
}

}  // namespace fitsum::optim
