// The trainer's running loss and gradient-norm statistics, kept on the training device so that an optimizer step
// asks the host for nothing (on CUDA, each read waits for the device to finish the work queued before it). The
// trainer reads them, in one read (util/device_reads.h), when it needs the numbers: at a log, an evaluation, a save
// and the end of the run, where HF's Trainer reads its tr_loss too. The sums are the very sums a host would keep
// (float64, added step by step in the same order), so the logged values are the same, bit for bit.
//
// A step whose loss or gradient norm is not finite is remembered (the first one: its step, loss and norm) and
// reported at the next read. HF's Trainer, with logging_nan_inf_filter (default true), tests each micro-batch's loss
// on the host (torch.isnan(tr_loss_step)), and so waits for the device every micro-batch; fitsum names the same
// step, a read later.
#pragma once

#include <cstdint>

#include <c10/core/Device.h>
#include <torch/types.h>

namespace fitsum::train {

class StepStatistics {
 public:
  struct Values {
    double loss_since_log = 0.0;  // summed step losses since the last log
    double total_loss = 0.0;      // summed step losses of the whole run
    double last_grad_norm = 0.0;
    std::int64_t non_finite_step = 0;  // the first step whose loss or gradient norm was not finite; 0: none
    double non_finite_loss = 0.0;
    double non_finite_grad_norm = 0.0;
  };

  // Starts on `device` from the host's values (a fresh run's zeros, or a resumed checkpoint's).
  void start(const c10::Device& device, double loss_since_log, double total_loss, double last_grad_norm);
  // After optimizer step `step`: its loss and gradient norm, 0-dim tensors on the device (any floating dtype).
  void add(std::int64_t step, const torch::Tensor& loss, const torch::Tensor& grad_norm);
  // Whether a step was added since the last read.
  bool unread() const { return unread_; }
  // Everything, in one read from the device.
  Values read();
  // After a log: the loss since the log starts again from 0.
  void reset_since_log();

 private:
  // (6) float64 on the device: Values' fields in their order.
  torch::Tensor state_;
  bool unread_ = false;
};

}  // namespace fitsum::train
