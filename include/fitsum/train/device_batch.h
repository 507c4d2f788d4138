// A collated micro-batch (CPU tensors, data/collator.h) on its way to the training device. What a training step
// needs to know of it on the host (its token counts, where its labels are, whether its ids fit the vocabulary) is
// found here, in the CPU tensors, before the copy: read back from the device, each would wait for the device to
// finish the work queued before it. On CUDA with pin_memory (HF's dataloader_pin_memory) the CPU tensors are
// pinned and copied asynchronously (non_blocking), so the copy overlaps the work already queued.
#pragma once

#include <cstdint>

#include <c10/core/Device.h>
#include <torch/types.h>

#include "fitsum/data/collator.h"
#include "fitsum/kernels/loss.h"

namespace fitsum::train {

struct DeviceBatch {
  torch::Tensor input_ids;          // (B, S) on the device
  torch::Tensor attention_mask;     // (B, S)
  torch::Tensor labels;             // (B, T)
  kernels::KnownLabels known;       // label rows (on the device), ids checked, the head bias's flag
  std::int64_t input_tokens = 0;    // attention_mask's ones
  std::int64_t input_elements = 0;  // input_ids' elements, padding included (HF's estimate_tokens)
  std::int64_t label_tokens = 0;    // labels that are not -100
};

struct DeviceBatchOptions {
  c10::Device device = c10::kCPU;
  std::int64_t vocab_size = 0;  // every input and label id must lie in [0, vocab_size)
  bool pin_memory = true;       // CUDA only: pinned host tensors, asynchronous copies
  bool bias_nonzero = true;     // kernels::KnownLabels::bias_nonzero, found once per run
};

// Throws std::invalid_argument naming the tensor and the id when an id lies outside the vocabulary (the message
// the model's own check gives, model/seq2seq.h).
DeviceBatch to_device(const data::Batch& batch, const DeviceBatchOptions& options);

}  // namespace fitsum::train
