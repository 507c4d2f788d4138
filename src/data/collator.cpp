// Implements include/fitsum/data/collator.h: fills int64 buffers row by row and hands them to torch once.
#include "fitsum/data/collator.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

namespace fitsum::data {

namespace {

std::int64_t round_up(std::int64_t length, const std::optional<std::int64_t>& multiple) {
  if (!multiple || *multiple <= 1) {
    return length;
  }
  return (length + *multiple - 1) / *multiple * *multiple;
}

// A (rows, columns) int64 tensor from a row-major buffer.
at::Tensor to_tensor(std::vector<std::int64_t>& values, std::int64_t rows, std::int64_t columns) {
  return torch::from_blob(values.data(), {rows, columns}, torch::kInt64).clone();
}

}  // namespace

Batch collate(const std::vector<Example>& examples, const std::vector<std::size_t>& indices,
              const CollatorOptions& options) {
  if (indices.empty()) {
    throw std::invalid_argument("cannot collate an empty batch");
  }
  std::size_t source_length = 0;
  std::size_t target_length = 0;
  std::size_t with_labels = 0;
  for (const std::size_t index : indices) {
    if (index >= examples.size()) {
      throw std::invalid_argument("example index " + std::to_string(index) + " is out of range (" +
                                  std::to_string(examples.size()) + " examples)");
    }
    const Example& example = examples[index];
    source_length = std::max(source_length, example.input_ids.size());
    if (example.labels) {
      ++with_labels;
      target_length = std::max(target_length, example.labels->size());
    }
  }
  if (with_labels != 0 && with_labels != indices.size()) {
    throw std::invalid_argument("a batch mixes examples with and without labels (" + std::to_string(with_labels) +
                                " of " + std::to_string(indices.size()) +
                                " have a summary); give every record a summary or none");
  }
  const auto rows = static_cast<std::int64_t>(indices.size());
  const std::int64_t source_columns = round_up(static_cast<std::int64_t>(source_length), options.pad_to_multiple_of);
  const std::int64_t target_columns = round_up(static_cast<std::int64_t>(target_length), options.pad_to_multiple_of);

  std::vector<std::int64_t> input_ids(static_cast<std::size_t>(rows * source_columns), options.pad_token_id);
  std::vector<std::int64_t> attention_mask(input_ids.size(), 0);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(rows * target_columns), options.label_pad_token_id);
  for (std::size_t row = 0; row < indices.size(); ++row) {
    const Example& example = examples[indices[row]];
    const std::size_t source_row = row * static_cast<std::size_t>(source_columns);
    std::copy(example.input_ids.begin(), example.input_ids.end(),
              input_ids.begin() + static_cast<std::ptrdiff_t>(source_row));
    if (example.attention_mask.empty()) {
      std::fill_n(attention_mask.begin() + static_cast<std::ptrdiff_t>(source_row), example.input_ids.size(), 1);
    } else {
      std::copy(example.attention_mask.begin(), example.attention_mask.end(),
                attention_mask.begin() + static_cast<std::ptrdiff_t>(source_row));
    }
    if (example.labels) {
      std::copy(example.labels->begin(), example.labels->end(),
                labels.begin() + static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(target_columns)));
    }
  }
  Batch batch;
  batch.input_ids = to_tensor(input_ids, rows, source_columns);
  batch.attention_mask = to_tensor(attention_mask, rows, source_columns);
  if (with_labels != 0) {
    batch.labels = to_tensor(labels, rows, target_columns);
  }
  return batch;
}

}  // namespace fitsum::data
