// TensorBoard event files: CRC-32C against its published check value, TFRecord framing read back by an independent
// reader (tests/support/event_file.h), HF's tag names, and the writer's records (file version first, then scalars).
#include <gtest/gtest.h>

#include "event_file.h"
#include "fitsum/io/tensorboard.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

TEST(TensorBoard, Crc32cHasTheCastagnoliCheckValue) {
  EXPECT_EQ(io::crc32c("123456789"), 0xE3069283u);  // the standard check value of CRC-32C
  EXPECT_EQ(io::crc32c(""), 0u);
  for (const std::string& text : {std::string("a"), std::string("brain.Event:2"), std::string(1000, '\xff')}) {
    EXPECT_EQ(io::masked_crc32c(text), reference_masked_crc32c(text)) << text.size();
  }
}

TEST(TensorBoard, RecordFramingHoldsLengthPayloadAndBothCrcs) {
  const std::string payload = "hello events";
  const auto record = io::tfrecord(payload);
  ASSERT_EQ(record.size(), 8u + 4u + payload.size() + 4u);
  EXPECT_EQ(static_cast<unsigned char>(record[0]), payload.size());
  for (int i = 1; i < 8; ++i) EXPECT_EQ(record[i], '\0');
  EXPECT_EQ(record.substr(12, payload.size()), payload);
}

TEST(TensorBoard, TagsAreHfRewriteLogs) {
  EXPECT_EQ(io::hf_tensorboard_tag("loss"), "train/loss");
  EXPECT_EQ(io::hf_tensorboard_tag("learning_rate"), "train/learning_rate");
  EXPECT_EQ(io::hf_tensorboard_tag("eval_loss"), "eval/loss");
  EXPECT_EQ(io::hf_tensorboard_tag("eval_rouge1"), "eval/rouge1");
  EXPECT_EQ(io::hf_tensorboard_tag("test_loss"), "test/loss");
  EXPECT_EQ(io::hf_tensorboard_tag("train_runtime"), "train/train_runtime");
}

TEST(TensorBoard, DefaultLoggingDirIsRunsDateAndHost) {
  const auto dir = io::default_logging_dir("out");
  EXPECT_EQ(dir.parent_path(), fs::path("out") / "runs");
  const auto name = dir.filename().string();  // e.g. Nov30_18-50-12_host
  ASSERT_GT(name.size(), 16u) << name;
  EXPECT_TRUE(std::isupper(static_cast<unsigned char>(name[0]))) << name;
  EXPECT_EQ(name[5], '_') << name;
  EXPECT_EQ(name[8], '-') << name;
  EXPECT_EQ(name[11], '-') << name;
  EXPECT_EQ(name[14], '_') << name;
}

TEST(TensorBoard, WriterRecordsReadBackWithValidCrcs) {
  if (!io::tensorboard_available()) GTEST_SKIP() << "built without protobuf";
  const auto dir = temp_dir("tensorboard");
  fs::path file;
  {
    io::TensorBoardWriter writer(dir / "logs");
    writer.add_scalar("train/loss", 2.5, 10);
    writer.add_scalar("eval/rouge1", 31.25, 20);
    writer.flush();
    file = writer.file();
  }
  EXPECT_EQ(file.parent_path(), dir / "logs");
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u) << file;
  const auto events = read_event_file(file);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.6e9);
  ASSERT_EQ(events[1].scalars.size(), 1u);
  EXPECT_EQ(events[1].scalars[0].first, "train/loss");
  EXPECT_EQ(events[1].scalars[0].second, 2.5f);
  EXPECT_EQ(events[1].step, 10);
  EXPECT_EQ(events[2].scalars[0].first, "eval/rouge1");
  EXPECT_EQ(events[2].scalars[0].second, 31.25f);
  EXPECT_EQ(events[2].step, 20);
}

}  // namespace
}  // namespace fitsum::test
