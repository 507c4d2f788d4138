// The optimizer half of a training step, shared by the Trainer, the memory planner's probe and `fitsum bench
// train`: clip the accumulated gradients, update, zero them for the next step. (The micro-step that accumulates
// them is model/micro_step.h.)
#pragma once

#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/types.h>

namespace fitsum::optim {

struct UpdateOptions {
  double max_grad_norm = 1.0;  // clip_grad_norm's max_norm; <= 0 measures only
  int threads = 0;             // LibTorch intra-op threads for the update (util/threads.h); 0: as they are
};

// clip_grad_norm, optimizer.step(), zero the gradients. Returns the norm before clipping.
double optimizer_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& parameters,
                      const UpdateOptions& options);

}  // namespace fitsum::optim
