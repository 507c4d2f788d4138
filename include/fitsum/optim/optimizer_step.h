// The optimizer half of a training step, shared by the Trainer, the memory planner's probe and `fitsum bench
// train`: clip the accumulated gradients, update, zero them for the next step. (The micro-step that accumulates
// them is model/micro_step.h.)
#pragma once

#include <functional>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/types.h>

namespace fitsum::optim {

struct UpdateOptions {
  double max_grad_norm = 1.0;  // clip_grad_norm's max_norm; <= 0 measures only
  int threads = 0;             // LibTorch intra-op threads for the update (util/threads.h); 0: as they are
  // ZeRO stage 2: sums a tensor over the processes, so that clipping sees the norm of every process's gradients.
  std::function<void(torch::Tensor&)> sum_over_processes;
};

// Zeroes the gradients in place, keeping their tensors, on every LibTorch: 2.0 made Optimizer::zero_grad free them
// by default (set_to_none), which moved the measured peaks of the same step by up to 2 MiB of 20 against the
// planner's model, where the gradients stay allocated between steps (memory/calibration.h). Unlike zero_grad it
// does not detach_() them: with several processes each gradient is a view of one flat buffer (train/trainer.h),
// which detach_() refuses; fitsum never builds a graph of gradients (no create_graph), so there is nothing to cut.
void zero_gradients(torch::optim::Optimizer& optimizer);

// clip_grad_norm, optimizer.step(), zero_gradients. Returns the norm before clipping, a 0-dim float32 tensor on the
// gradients' device (read it when it is needed: each read waits for the device). fitsum's optimizers
// (TreatedUpdate) clip and zero inside their update's passes over memory; the result is the same, bit for bit.
torch::Tensor optimizer_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& parameters,
                      const UpdateOptions& options);

}  // namespace fitsum::optim
