// Greedy search (HF GenerationMixin.greedy_search for encoder-decoders): at each step every unfinished sequence
// takes the arg-max of its processed logits; a sequence is finished at its eos and gets pad afterwards. Finished
// sequences are dropped from the decoder batch (their cache rows too), so they cost nothing further.
#pragma once

#include <ATen/core/Tensor.h>

#include "fitsum/generate/generate.h"

namespace fitsum::generate {

// input_ids (B, S), attention_mask (B, S) on the model's device; options.num_beams must be 1.
GenerationResult greedy_search(model::Seq2SeqLMImpl& model, const at::Tensor& input_ids,
                               const at::Tensor& attention_mask, const GenerationOptions& options);

}  // namespace fitsum::generate
