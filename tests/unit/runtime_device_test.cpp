// The device a process trains on (util/runtime.h) where no GPU is: the CPU for "cpu" and "auto" whatever the
// process's place on its machine (LOCAL_RANK), and "cuda" refused in one line. (tests/gpu/cuda_device_test.cpp checks
// the device per local rank on a GPU machine.)
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "fitsum/util/runtime.h"

namespace fitsum::test {
namespace {

TEST(RuntimeDevice, WithoutAGpuEveryLocalRankTrainsOnTheCpu) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible: tests/gpu covers it";
  for (int local_rank : {0, 1, 7}) {
    EXPECT_EQ(util::resolve_device("cpu", local_rank), c10::Device(c10::kCPU));
    EXPECT_EQ(util::resolve_device("auto", local_rank), c10::Device(c10::kCPU));
    try {
      util::resolve_device("cuda", local_rank);
      FAIL() << "device cuda accepted without a GPU";
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("device cuda: ", 0), 0u) << message;
      EXPECT_NE(message.find("use device cpu"), std::string::npos) << message;
    }
  }
  EXPECT_THROW(util::resolve_device("tpu", 0), std::invalid_argument);
}

}  // namespace
}  // namespace fitsum::test
