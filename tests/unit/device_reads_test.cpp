// util/device_reads.h and util/device_timer.h on the CPU, and the rule that keeps a training step free of reads
// from the device: the files a step runs through read tensor values only through util::read_to_host.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <torch/torch.h>

#include "fitsum/util/device_reads.h"
#include "fitsum/util/device_timer.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

TEST(DeviceReads, EachReadIsCountedAndGivesTheValuesOnTheHost) {
  const auto before = util::device_reads();
  const auto t = torch::tensor({1.5, -2.0}, torch::kDouble);
  const auto host = util::read_to_host(t);
  EXPECT_TRUE(host.is_cpu());
  EXPECT_TRUE(torch::equal(host, t));
  util::read_to_host(t);
  EXPECT_EQ(util::device_reads() - before, 2);
}

TEST(DeviceTimer, OnTheCpuItTimesWithTheHostClock) {
  util::DeviceTimer timer(torch::kCPU);
  timer.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  const double first = timer.seconds();
  EXPECT_GE(first, 0.055);
  EXPECT_LT(first, 5.0);
  EXPECT_GE(timer.seconds(), first);  // seconds() does not restart the timer
  timer.start();                      // start() does
  EXPECT_LT(timer.seconds(), first);
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The files one training step runs through (train/trainer.cpp's step, the micro-step, the optimizer step, the batch
// transfer and the step statistics) read no tensor value directly: `.item`, a copy to the CPU or a host pointer
// into a tensor would each wait for the device on CUDA. The reads they need go through util::read_to_host, which
// counts them (tests/model/device_reads_test.cpp holds the trainer to one read per log).
TEST(DeviceReads, TheStepsFilesReadTheDeviceOnlyThroughReadToHost) {
  const std::regex forbidden(R"(\.item\s*[<(]|\.to\(\s*(torch|at|c10)::kCPU|\.cpu\(\)|\.tolist\(|\.any\(\)\.item)");
  for (const char* file : {"src/train/trainer.cpp", "src/train/step_statistics.cpp", "src/model/micro_step.cpp",
                           "src/optim/optimizer_step.cpp", "src/train/device_batch.cpp"}) {
    const auto text = read_text(source_dir() / file);
    ASSERT_FALSE(text.empty()) << file;
    std::smatch match;
    EXPECT_FALSE(std::regex_search(text, match, forbidden))
        << file << " reads a tensor on the host: '" << match.str() << "'; use util::read_to_host at a log";
  }
}

}  // namespace
}  // namespace fitsum::test
