// The free-disk check before a training run: the predicted size of one checkpoint, against the size Hugging Face's
// google/pegasus-large checkpoint has (model.safetensors 2.28 GB for 570.8M float32 values; issue 16 measured
// ~6.8 GB for a fitsum checkpoint with AdamW's two moments), and when the check warns.
#include <gtest/gtest.h>

#include "fitsum/train/training_job.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::train {
namespace {

TEST(FreeDisk, APegasusLargeCheckpointIsPredictedAtItsSizeOnDisk) {
  const auto large = model::pegasus_shape("large");
  const double weights_only = static_cast<double>(predicted_checkpoint_bytes(large, std::nullopt, 0));
  EXPECT_NEAR(weights_only / 2.28e9, 1.0, 0.01) << weights_only;
  // AdamW: exp_avg and exp_avg_sq beside every trainable value (3x the weights, a little less: buffers have none).
  const double adamw = static_cast<double>(predicted_checkpoint_bytes(large, optim::OptimizerType::adamw_torch, 0));
  EXPECT_NEAR(adamw / 6.8e9, 1.0, 0.02) << adamw;
  // Adafactor's factored second moment: rows + columns, under 1% of the weights.
  const double adafactor = static_cast<double>(predicted_checkpoint_bytes(large, optim::OptimizerType::adafactor, 0));
  EXPECT_GT(adafactor, weights_only);
  EXPECT_LT(adafactor, weights_only * 1.01);
  // The tokenizer files copied beside the weights count in full.
  EXPECT_EQ(predicted_checkpoint_bytes(large, std::nullopt, 1904432) - predicted_checkpoint_bytes(large, std::nullopt, 0),
            1904432u);
}

TEST(FreeDisk, WarnsOnlyWhenOneCheckpointDoesNotFitNamingBothSizes) {
  EXPECT_FALSE(free_disk_warning("out", 10u << 20, 10u << 20));
  EXPECT_FALSE(free_disk_warning("out", 1ull << 40, 10u << 20));
  const auto warning = free_disk_warning("runs/out", (10u << 20) - 1, 10u << 20);
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("output_dir 'runs/out' has 10.00 MiB free, less than one checkpoint takes (about 10.00 MiB)"),
            std::string::npos)
      << *warning;
  EXPECT_NE(warning->find("choose an output_dir on another disk"), std::string::npos) << *warning;
}

TEST(FreeDisk, TheFileSystemOfAFolderReportsItsFreeBytes) {
  const auto free_bytes = util::free_disk_bytes(test::temp_dir("free-disk"));
  ASSERT_TRUE(free_bytes);
  EXPECT_GT(*free_bytes, 0u);
  EXPECT_FALSE(util::free_disk_bytes(test::temp_dir("free-disk") / "no" / "such" / "folder"));
}

}  // namespace
}  // namespace fitsum::train
