// Pads a list of examples into one batch of tensors, as HF's DataCollatorForSeq2Seq does (padding side right):
// input_ids padded with the pad id and an attention mask (1 = token, 0 = padding), labels padded with -100 (the
// loss ignores them), every length optionally rounded up to pad_to_multiple_of. The decoder inputs are not made
// here: the model derives them from the labels (shift right, decoder_start_token_id).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "fitsum/data/dataset.h"

namespace fitsum::data {

struct CollatorOptions {
  std::int64_t pad_token_id = 0;           // PEGASUS's <pad>
  std::int64_t label_pad_token_id = -100;  // HF's ignore index
  std::optional<std::int64_t> pad_to_multiple_of;
};

// Tensors are torch::Tensor (at::Tensor is the same type), int64 on the CPU.
struct Batch {
  at::Tensor input_ids;       // (B, S)
  at::Tensor attention_mask;  // (B, S)
  at::Tensor labels;          // (B, T); undefined when the examples have no labels (prediction)
};

// Collates examples[indices[0]], examples[indices[1]], ... in that order. Throws std::invalid_argument for an
// empty list, an index out of range, or a mix of examples with and without labels.
Batch collate(const std::vector<Example>& examples, const std::vector<std::size_t>& indices,
              const CollatorOptions& options = {});

}  // namespace fitsum::data
