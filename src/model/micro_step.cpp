// Implements include/fitsum/model/micro_step.h.
#include "fitsum/model/micro_step.h"

#include <torch/torch.h>

#include "fitsum/model/host_checked_ids.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::model {

kernels::TokenLoss micro_batch_loss(Seq2SeqLMImpl& model, const torch::Tensor& input_ids,
                                    const torch::Tensor& attention_mask, const torch::Tensor& labels,
                                    const MicroBatchOptions& options) {
  util::AutocastGuard autocast(input_ids.device().type(), torch::kBFloat16, options.bf16);
  IdsCheckedOnHost ids_checked(options.known != nullptr && options.known->ids_checked);
  auto encoded = model.encode(input_ids, attention_mask);  // (B, S, D)
  if (options.on_encoder_output) options.on_encoder_output(encoded);
  auto hidden = model.decode(model.shift_tokens_right(labels), encoded, attention_mask);  // (B, T, D)
  return options.fused_loss ? model.token_loss(hidden, labels, options.label_smoothing, options.known)
                            : kernels::label_loss_sum(model.lm_logits(hidden), labels, options.label_smoothing);
}

kernels::TokenLoss forward_backward(Seq2SeqLMImpl& model, const torch::Tensor& input_ids,
                                    const torch::Tensor& attention_mask, const torch::Tensor& labels,
                                    const MicroBatchOptions& options) {
  auto token_loss = micro_batch_loss(model, input_ids, attention_mask, labels, options);
  (token_loss.sum * options.loss_scale).backward();
  token_loss.sum = token_loss.sum.detach();
  return token_loss;
}

}  // namespace fitsum::model
