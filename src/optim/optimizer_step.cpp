// Implements include/fitsum/optim/optimizer_step.h.
#include "fitsum/optim/optimizer_step.h"

#include "fitsum/optim/optimizers.h"
#include "fitsum/util/threads.h"

namespace fitsum::optim {

double optimizer_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& parameters,
                      const UpdateOptions& options) {
  util::IntraOpThreadsGuard threads(options.threads);
  const double norm = clip_grad_norm(parameters, options.max_grad_norm);
  optimizer.step();
  optimizer.zero_grad();
  return norm;
}

}  // namespace fitsum::optim
