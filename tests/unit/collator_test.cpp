// DataCollatorForSeq2Seq semantics: inputs padded with 0 and an attention mask, labels padded with -100, lengths
// rounded up to pad_to_multiple_of, int64 tensors in the order of the indices.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "fitsum/data/collator.h"

namespace fitsum::data {
namespace {

Example example(std::vector<TokenId> input_ids, std::optional<std::vector<TokenId>> labels) {
  Example result;
  result.input_ids = std::move(input_ids);
  result.labels = std::move(labels);
  return result;
}

torch::Tensor tensor(std::vector<std::vector<std::int64_t>> rows) {
  std::vector<std::int64_t> flat;
  for (const auto& row : rows) {
    flat.insert(flat.end(), row.begin(), row.end());
  }
  return torch::tensor(flat).reshape({static_cast<std::int64_t>(rows.size()), -1});
}

const std::vector<Example> kExamples = {
    example({11, 12, 13, 1}, std::vector<TokenId>{21, 1}),
    example({14, 1}, std::vector<TokenId>{22, 23, 24, 1}),
    example({15, 16, 17, 18, 19, 1}, std::vector<TokenId>{1}),
};

TEST(Collator, PadsInputsWithZeroAndLabelsWithMinus100) {
  const Batch batch = collate(kExamples, {1, 0});
  EXPECT_EQ(batch.input_ids.scalar_type(), torch::kInt64);
  EXPECT_EQ(batch.attention_mask.scalar_type(), torch::kInt64);
  EXPECT_EQ(batch.labels.scalar_type(), torch::kInt64);
  EXPECT_TRUE(torch::equal(batch.input_ids, tensor({{14, 1, 0, 0}, {11, 12, 13, 1}})));
  EXPECT_TRUE(torch::equal(batch.attention_mask, tensor({{1, 1, 0, 0}, {1, 1, 1, 1}})));
  EXPECT_TRUE(torch::equal(batch.labels, tensor({{22, 23, 24, 1}, {21, 1, -100, -100}})));
}

TEST(Collator, RoundsLengthsUpToAMultiple) {
  CollatorOptions options;
  options.pad_to_multiple_of = 4;
  const Batch batch = collate(kExamples, {0, 1, 2}, options);
  EXPECT_EQ(batch.input_ids.sizes(), (std::vector<std::int64_t>{3, 8}));
  EXPECT_EQ(batch.labels.sizes(), (std::vector<std::int64_t>{3, 4}));
  EXPECT_TRUE(torch::equal(batch.input_ids[2], torch::tensor(std::vector<std::int64_t>{15, 16, 17, 18, 19, 1, 0, 0})));
  EXPECT_EQ(batch.attention_mask.sum().item<std::int64_t>(), 4 + 2 + 6);
  EXPECT_TRUE(torch::equal(batch.labels[2], torch::tensor(std::vector<std::int64_t>{1, -100, -100, -100})));
  const Batch exact = collate(kExamples, {0}, options);  // already a multiple: no extra padding
  EXPECT_EQ(exact.input_ids.sizes(), (std::vector<std::int64_t>{1, 4}));
}

TEST(Collator, KeepsAGivenAttentionMaskAndOmitsMissingLabels) {
  std::vector<Example> examples = {example({5, 6, 1}, std::nullopt), example({7, 1}, std::nullopt)};
  examples[0].attention_mask = {1, 0, 1};
  const Batch batch = collate(examples, {0, 1});
  EXPECT_TRUE(torch::equal(batch.attention_mask, tensor({{1, 0, 1}, {1, 1, 0}})));
  EXPECT_FALSE(batch.labels.defined());
}

TEST(Collator, RefusesEmptyOrMixedBatches) {
  EXPECT_THROW(collate(kExamples, {}), std::invalid_argument);
  EXPECT_THROW(collate(kExamples, {3}), std::invalid_argument);
  std::vector<Example> mixed = kExamples;
  mixed[1].labels.reset();
  EXPECT_THROW(collate(mixed, {0, 1}), std::invalid_argument);
}

}  // namespace
}  // namespace fitsum::data
