// train/device_batch.h: what a step needs to know of a collated batch is found on the host, before the copy, and is
// what the device would have found: token counts, the label rows, and the ids' check against the vocabulary.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "fitsum/data/collator.h"
#include "fitsum/train/device_batch.h"

namespace fitsum::train {
namespace {

data::Example example(std::vector<data::TokenId> input_ids, std::vector<data::TokenId> labels) {
  data::Example e;
  e.input_ids = std::move(input_ids);
  e.labels = std::move(labels);
  return e;
}

TEST(DeviceBatch, CountsAndLabelRowsAreTheDevicesOwn) {
  const std::vector<data::Example> examples = {example({11, 12, 13, 1}, {21, 1}), example({14, 1}, {22, 23, 24, 1})};
  const auto batch = data::collate(examples, {0, 1});
  DeviceBatchOptions options;
  options.vocab_size = 100;
  options.bias_nonzero = false;
  const auto on_device = to_device(batch, options);
  EXPECT_EQ(on_device.input_tokens, 6);     // 4 + 2 real positions of 8
  EXPECT_EQ(on_device.input_elements, 8);  // padding included
  EXPECT_EQ(on_device.label_tokens, 6);
  EXPECT_TRUE(torch::equal(on_device.known.rows, batch.labels.reshape({-1}).ne(-100).nonzero().squeeze(1)));
  EXPECT_TRUE(on_device.known.ids_checked);
  EXPECT_FALSE(on_device.known.bias_nonzero);
  EXPECT_TRUE(torch::equal(on_device.input_ids, batch.input_ids));
  EXPECT_TRUE(torch::equal(on_device.attention_mask, batch.attention_mask));
  EXPECT_TRUE(torch::equal(on_device.labels, batch.labels));
}

TEST(DeviceBatch, AnIdOutsideTheVocabularyIsNamedBeforeTheCopy) {
  DeviceBatchOptions options;
  options.vocab_size = 50;
  const auto expect_error = [&](const data::Example& e, const std::string& needle) {
    try {
      to_device(data::collate({e}, {0}), options);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
    }
  };
  expect_error(example({11, 60, 1}, {21, 1}), "input_ids holds token id 60, outside the model's vocabulary 0..49");
  expect_error(example({11, 1}, {21, 50}), "labels holds token id 50, outside the model's vocabulary 0..49");
  expect_error(example({11, 1}, {-3, 1}), "labels holds token id -3");
}

}  // namespace
}  // namespace fitsum::train
