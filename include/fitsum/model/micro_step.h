// One micro-step of training, shared by the Trainer, the memory planner's probe and `fitsum bench train`, so that
// what is planned and benchmarked is exactly what training runs:
//   micro_batch_loss  encode, decode, summed token loss (still attached to the graph), under bf16 autocast when asked;
//   forward_backward  that, then the backward of loss_sum * loss_scale (gradients accumulate into .grad).
// The optimizer half of a step (clip, update, zero) is optim/optimizer_step.h.
#pragma once

#include <functional>

#include <torch/types.h>

#include "fitsum/kernels/loss.h"
#include "fitsum/model/seq2seq.h"

namespace fitsum::model {

struct MicroBatchOptions {
  double loss_scale = 1.0;       // the backward pass differentiates loss_sum * loss_scale (1 / tokens of the step)
  double label_smoothing = 0.0;  // HF's label_smoothing_factor
  bool bf16 = false;             // bfloat16 autocast for the forward pass
  // The fused LM head + cross-entropy (Seq2SeqLMImpl::token_loss, the default); false computes full logits and
  // label_loss_sum from them, as HF does. Same loss and gradients.
  bool fused_loss = true;
  // Called with the encoder's output (B, S, D) before the decoder uses it, e.g. to register a gradient hook: the
  // memory planner's probe tells the decoder's backward phase from the encoder's by it.
  std::function<void(torch::Tensor&)> on_encoder_output;
  // What the host found in the collated batch before copying it (kernels/loss.h): with it, the stacks skip their
  // check of the ids (done on the host, model/host_checked_ids.h) and the fused loss reads nothing back from the
  // device, so a micro-step queues its work without waiting for the device. Unset: found on the device.
  const kernels::KnownLabels* known = nullptr;
};

// The forward half alone. The trainer calls it and the backward separately, to tell an out-of-memory error in the
// forward (nothing accumulated yet) from one in the backward.
kernels::TokenLoss micro_batch_loss(Seq2SeqLMImpl& model, const torch::Tensor& input_ids,
                                    const torch::Tensor& attention_mask, const torch::Tensor& labels,
                                    const MicroBatchOptions& options);

// input_ids, attention_mask (B, S) and labels (B, T) on the model's device. Returns the summed loss (detached) and
// the label tokens it covers.
kernels::TokenLoss forward_backward(Seq2SeqLMImpl& model, const torch::Tensor& input_ids,
                                    const torch::Tensor& attention_mask, const torch::Tensor& labels,
                                    const MicroBatchOptions& options);

}  // namespace fitsum::model
