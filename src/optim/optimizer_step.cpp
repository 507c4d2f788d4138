// Implements include/fitsum/optim/optimizer_step.h.
#include "fitsum/optim/optimizer_step.h"

#include "fitsum/optim/optimizers.h"
#include "fitsum/util/threads.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::optim {

void zero_gradients(torch::optim::Optimizer& optimizer) {
#if FITSUM_TORCH_AT_LEAST(2, 0)
  optimizer.zero_grad(/*set_to_none=*/false);
#else
  optimizer.zero_grad();
#endif
}

double optimizer_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& parameters,
                      const UpdateOptions& options) {
  util::IntraOpThreadsGuard threads(options.threads);
  const double norm = clip_grad_norm(parameters, options.max_grad_norm);
  optimizer.step();
  zero_gradients(optimizer);
  return norm;
}

}  // namespace fitsum::optim
