// TensorBoard event files, as HF's TensorBoardCallback (through torch's SummaryWriter) writes them for report_to
// tensorboard: `events.out.tfevents.<seconds>.<hostname>` in the logging folder, a sequence of TFRecord records
// (length, masked CRC32C of the length, a serialised tensorflow.Event, masked CRC32C of it), the first holding the
// file version "brain.Event:2", the others one scalar each (Summary.Value.simple_value). The Event messages come
// from protobuf (src/io/tensorboard_event.proto, TensorBoard's field numbers); the framing and its CRC are here.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace fitsum::io {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses it.
std::uint32_t crc32c(std::string_view data);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
std::uint32_t masked_crc32c(std::string_view data);
// One TFRecord: uint64 length (little endian), masked CRC of those 8 bytes, the payload, masked CRC of the payload.
std::string tfrecord(std::string_view payload);

// HF's rewrite_logs: "eval_loss" -> "eval/loss", "test_x" -> "test/x", anything else "loss" -> "train/loss".
std::string hf_tensorboard_tag(const std::string& log_key);

// HF's default logging_dir: output_dir/runs/<Mon><DD>_<HH>-<MM>-<SS>_<hostname> (local time now).
std::filesystem::path default_logging_dir(const std::filesystem::path& output_dir);

// True when this build can write event files (it was built with protobuf).
bool tensorboard_available();

class TensorBoardWriter {
 public:
  // Creates `logging_dir` and a new event file in it; throws std::runtime_error naming the folder when it cannot.
  explicit TensorBoardWriter(const std::filesystem::path& logging_dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(const std::string& tag, double value, std::int64_t step);
  void flush();  // after each log: TensorBoard reads the file while the run goes on
  const std::filesystem::path& file() const { return file_; }

 private:
  void write_event(const std::string& serialized);
  std::filesystem::path file_;
  std::FILE* stream_ = nullptr;
};

}  // namespace fitsum::io
