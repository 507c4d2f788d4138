// The optimizer on the host (`--offload_optimizer cpu`, ZeRO-Offload's idea): the training device keeps the float32
// weights and their gradients; the host keeps a float32 copy of each trainable weight, a gradient buffer beside it
// and the optimizer's state, and runs fitsum's own update (optim/optimizers.h, the fused CPU kernels) on them.
//
// One optimizer step: after the last micro-batch's backward every gradient is copied into its host buffer (on CUDA
// into pinned memory, on a side stream, one copy per parameter as soon as the backward has ended; the host waits
// for them), the device's gradients are zeroed for the next step, the host clips and updates exactly as the on-device
// step does (optim::optimizer_step), and every updated weight is copied back (on CUDA non_blocking from pinned memory
// on the side stream, with the compute stream waiting for the copies, so the next forward runs after them). On the
// CPU build the device and the host are the same memory and the same code runs with plain copies: the result is
// the on-device step's, bit for bit. The host's bytes are counted apart from the device's (memory::HostMemoryScope),
// so the device's peak and its --max_memory leave them out and --max_host_memory covers them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include "fitsum/optim/optimizer_step.h"
#include "fitsum/optim/optimizers.h"
#include "fitsum/train/training_arguments.h"

namespace fitsum::train {

class OptimizerOffload {
 public:
  // Host copies of `device_parameters` (their current values). Throws std::invalid_argument naming
  // max_host_memory when the host copies, gradient buffers and the optimizer state (host_bytes) exceed
  // `host_budget` bytes (0: no check).
  OptimizerOffload(const optim::NamedTensors& device_parameters, const c10::Device& device,
                   optim::OptimizerType optimizer, std::uint64_t host_budget);
  ~OptimizerOffload();
  OptimizerOffload(const OptimizerOffload&) = delete;
  OptimizerOffload& operator=(const OptimizerOffload&) = delete;

  // What the optimizer updates (optim::make_optimizer's in_place_of) and what its state is exported by name under.
  const optim::NamedTensors& host_parameters() const { return host_; }
  // The host copies take the device's weights again (after a resume or anything else wrote the model).
  void pull_weights();
  // Gradients out, clip and update on the host, weights back; the device's gradients are left zero. Returns the
  // norm before clipping, as optim::optimizer_step.
  torch::Tensor step(torch::optim::Optimizer& host_optimizer, const optim::UpdateOptions& options);
  void zero_device_gradients();
  // Weights, gradient buffers and optimizer state on the host.
  std::uint64_t host_bytes() const;
  // The host's peak since the last call (the tracking allocator's host count on the CPU; on CUDA, whose pinned
  // buffers another allocator holds, host_bytes()).
  std::int64_t peak_host_bytes();
  // What `optimizer` keeps for tensors of these shapes (AdamW two moments, Adafactor's factored or full second
  // moment, float32).
  static std::uint64_t optimizer_state_bytes(const optim::NamedTensors& parameters, optim::OptimizerType optimizer);

 private:
  void copy_gradients_out();
  void copy_weights_back();

  c10::Device device_;
  torch::TensorOptions host_options_;      // float32 on the CPU, pinned when the device is CUDA
  optim::NamedTensors device_parameters_;  // the model's parameters, on the training device
  optim::NamedTensors host_;               // their host copies, each with its gradient buffer as .grad()
  std::vector<torch::Tensor> host_list_;
  std::uint64_t optimizer_state_bytes_ = 0;
  struct CudaStreams;  // the side stream of the copies (CUDA builds)
  std::unique_ptr<CudaStreams> cuda_;
};

// The offload `args` ask for (none: nullptr), its host bytes checked against args.max_host_memory (0: the
// machine's available memory).
std::unique_ptr<OptimizerOffload> make_optimizer_offload(const TrainingArguments& args,
                                                         const optim::NamedTensors& parameters,
                                                         const c10::Device& device);

}  // namespace fitsum::train
