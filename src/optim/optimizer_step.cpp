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

torch::Tensor optimizer_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& parameters,
                      const UpdateOptions& options) {
  util::IntraOpThreadsGuard threads(options.threads);
  auto* treated = dynamic_cast<TreatedUpdate*>(&optimizer);
  if (treated == nullptr) {
    auto norm = clip_grad_norm(parameters, options.max_grad_norm, options.sum_over_processes);
    optimizer.step();
    zero_gradients(optimizer);
    return norm;
  }
  auto norm = gradient_norm(parameters, options.sum_over_processes);
  treated->update({clip_factor(norm, options.max_grad_norm), /*zero_after=*/true});
  return norm;
}

}  // namespace fitsum::optim
