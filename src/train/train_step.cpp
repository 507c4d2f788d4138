// Implements include/fitsum/train/train_step.h.
#include "fitsum/train/train_step.h"

#include <torch/torch.h>

#include "fitsum/optim/optimizers.h"
#include "fitsum/util/threads.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::train {

model::TokenLoss micro_batch_loss(model::Seq2SeqLMImpl& model, const torch::Tensor& input_ids,
                                  const torch::Tensor& attention_mask, const torch::Tensor& labels,
                                  const MicroBatchOptions& options) {
  util::AutocastGuard autocast(input_ids.device().type(), torch::kBFloat16, options.bf16);
  auto encoded = model.encode(input_ids, attention_mask);                                 // (B, S, D)
  auto hidden = model.decode(model.shift_tokens_right(labels), encoded, attention_mask);  // (B, T, D)
  return options.fused_loss ? model.token_loss(hidden, labels, options.label_smoothing)
                            : model::label_loss_sum(model.lm_logits(hidden), labels, options.label_smoothing);
}

model::TokenLoss forward_backward(model::Seq2SeqLMImpl& model, const torch::Tensor& input_ids,
                                  const torch::Tensor& attention_mask, const torch::Tensor& labels,
                                  const MicroBatchOptions& options) {
  auto token_loss = micro_batch_loss(model, input_ids, attention_mask, labels, options);
  (token_loss.sum * options.loss_scale).backward();
  token_loss.sum = token_loss.sum.detach();
  return token_loss;
}

double optimizer_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& parameters,
                      const UpdateOptions& options) {
  util::IntraOpThreadsGuard threads(options.threads);
  const double norm = optim::clip_grad_norm(parameters, options.max_grad_norm);
  optimizer.step();
  optimizer.zero_grad();
  return norm;
}

}  // namespace fitsum::train
