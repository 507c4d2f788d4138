// Implements include/fitsum/train/device_batch.h. Every count and check here reads CPU tensors in place.
#include "fitsum/train/device_batch.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

namespace fitsum::train {

namespace {

// The ids of a CPU int64 tensor, in place.
const std::int64_t* ids_of(const torch::Tensor& t, const char* name) {
  if (!t.is_cpu() || t.scalar_type() != torch::kLong || !t.is_contiguous()) {
    throw std::invalid_argument(std::string("a collated ") + name + " must be a contiguous int64 CPU tensor");
  }
  return t.data_ptr<std::int64_t>();
}

void check_ids(const torch::Tensor& ids, std::int64_t vocab_size, const char* name, bool ignore_minus_100) {
  const auto* begin = ids_of(ids, name);
  const auto* end = begin + ids.numel();
  const auto* bad = std::find_if(begin, end, [&](std::int64_t id) {
    return (id < 0 || id >= vocab_size) && !(ignore_minus_100 && id == -100);
  });
  if (bad == end) return;
  throw std::invalid_argument(std::string(name) + " holds token id " + std::to_string(*bad) +
                              ", outside the model's vocabulary 0.." + std::to_string(vocab_size - 1) +
                              " (vocab_size " + std::to_string(vocab_size) +
                              "); encode with the model's own tokenizer");
}

std::int64_t count_mask_ones(const torch::Tensor& mask) {
  const auto* begin = ids_of(mask, "attention_mask");
  return static_cast<std::int64_t>(std::count_if(begin, begin + mask.numel(), [](std::int64_t v) { return v != 0; }));
}

torch::Tensor copy_to(const torch::Tensor& t, const DeviceBatchOptions& options) {
  if (options.device.is_cpu()) return t;
#ifdef FITSUM_WITH_CUDA
  // A pinned source lets the copy run asynchronously, behind the work already queued; the caching host allocator
  // keeps the pinned block alive until the copy that reads it has run.
  if (options.device.is_cuda() && options.pin_memory) return t.pin_memory().to(options.device, /*non_blocking=*/true);
#endif
  return t.to(options.device);
}

}  // namespace

DeviceBatch to_device(const data::Batch& batch, const DeviceBatchOptions& options) {
  check_ids(batch.input_ids, options.vocab_size, "input_ids", false);
  check_ids(batch.labels, options.vocab_size, "labels", true);
  DeviceBatch out;
  out.input_tokens = count_mask_ones(batch.attention_mask);
  out.input_elements = batch.input_ids.numel();
  const auto rows = batch.labels.reshape({-1}).ne(-100).nonzero().squeeze(1);  // (M) int64, on the CPU
  out.label_tokens = rows.size(0);
  out.input_ids = copy_to(batch.input_ids, options);
  out.attention_mask = copy_to(batch.attention_mask, options);
  out.labels = copy_to(batch.labels, options);
  out.known.rows = copy_to(rows.contiguous(), options);
  out.known.ids_checked = true;
  out.known.bias_nonzero = options.bias_nonzero;
  return out;
}

}  // namespace fitsum::train
