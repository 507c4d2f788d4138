// The two halves of one optimizer step, shared by the Trainer and `fitsum bench train` so that the benchmark
// measures exactly what training runs:
//   forward_backward  one micro-batch: encode, decode, summed token loss, backward of loss_sum * loss_scale
//                     (gradients accumulate into .grad);
//   optimizer_step    clip the accumulated gradients, update, zero them for the next step.
#pragma once

#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include "fitsum/model/seq2seq.h"

namespace fitsum::train {

struct MicroBatchOptions {
  double loss_scale = 1.0;       // the backward pass differentiates loss_sum * loss_scale (1 / tokens of the step)
  double label_smoothing = 0.0;  // HF's label_smoothing_factor
  bool bf16 = false;             // bfloat16 autocast for the forward pass
  // The fused LM head + cross-entropy (Seq2SeqLMImpl::token_loss, the default); false computes full logits and
  // label_loss_sum from them, as HF does. Same loss and gradients.
  bool fused_loss = true;
};

// The forward half alone: encode, decode and the summed token loss (still attached to the graph), under bf16
// autocast when asked. The trainer calls it and the backward separately, to tell an out-of-memory error in the
// forward (nothing accumulated yet) from one in the backward.
model::TokenLoss micro_batch_loss(model::Seq2SeqLMImpl& model, const torch::Tensor& input_ids,
                                  const torch::Tensor& attention_mask, const torch::Tensor& labels,
                                  const MicroBatchOptions& options);

// input_ids, attention_mask (B, S) and labels (B, T) on the model's device. Returns the summed loss (detached) and
// the label tokens it covers.
model::TokenLoss forward_backward(model::Seq2SeqLMImpl& model, const torch::Tensor& input_ids,
                                  const torch::Tensor& attention_mask, const torch::Tensor& labels,
                                  const MicroBatchOptions& options);

struct UpdateOptions {
  double max_grad_norm = 1.0;  // clip_grad_norm's max_norm; <= 0 measures only
  int threads = 0;             // LibTorch intra-op threads for the update (util/threads.h); 0: as they are
};

// clip_grad_norm, optimizer.step(), zero the gradients. Returns the norm before clipping.
double optimizer_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& parameters,
                      const UpdateOptions& options);

}  // namespace fitsum::train
