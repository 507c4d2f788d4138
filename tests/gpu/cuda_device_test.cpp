// Which CUDA device a process of a data-parallel job takes (label `gpu`; bench/gpu.sh runs it on a lent GPU
// machine): process LOCAL_RANK of a machine takes cuda:LOCAL_RANK, and a rank beyond the visible devices is refused
// in one line naming LOCAL_RANK. Without a CUDA device it skips.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "fitsum/util/runtime.h"

namespace fitsum::test {
namespace {

TEST(CudaDevice, EachLocalRankTakesItsOwnDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto visible = static_cast<int>(torch::cuda::device_count());
  for (int local_rank = 0; local_rank < visible; ++local_rank) {
    EXPECT_EQ(util::resolve_device("cuda", local_rank), c10::Device(c10::kCUDA, local_rank));
    EXPECT_EQ(util::resolve_device("auto", local_rank), c10::Device(c10::kCUDA, local_rank));
  }
  try {
    util::resolve_device("cuda", visible);
    FAIL() << "local rank " << visible << " of " << visible << " devices was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("LOCAL_RANK"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace fitsum::test
