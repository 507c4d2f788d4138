// HF's estimate of a training step's floating-point operations (Trainer.floating_point_ops, which calls
// PreTrainedModel.floating_point_ops): 6 x the tokens of the batch's input_ids, padding included
// (estimate_tokens counts input_ids.numel(); labels and decoder inputs are not counted) x the parameters outside
// embedding modules (num_parameters(exclude_embeddings=True)). The 6 is 2 for the forward's multiply-add and 4 for
// the backward. Trainer sums it over every micro-batch into trainer_state.json's total_flos.
#pragma once

#include <cstdint>

namespace fitsum::model {
class Seq2SeqLMImpl;
}

namespace fitsum::train {

// The model's parameters, each tensor counted once (a tied LM head is model.shared), leaving out those of HF's
// nn.Embedding modules: the token table (shared / embed_tokens), learned position tables (embed_positions) and T5's
// relative_attention_bias. Sinusoidal position tables are buffers and never counted.
std::int64_t non_embedding_parameter_count(const model::Seq2SeqLMImpl& model);

// 6 x input_elements x parameters, as a double (HF's float).
double floating_point_ops(std::int64_t input_elements, std::int64_t non_embedding_parameters);

}  // namespace fitsum::train
