// The planner's probe on a CUDA device (label `gpu`; bench/gpu.sh runs it on a lent GPU machine): it leaves no
// cached memory behind. The caching allocator keeps freed blocks reserved until they are released, so without
// that every later max_memory_reserved of the run would carry the probe's copies (at pegasus-large's widths two
// 375 MiB embeddings with their gradients, and the probe's largest batches). Without a CUDA device it skips;
// FITSUM_GPU_TESTS_ON_CPU=1 runs it on the CPU, where reserved is what the tracking allocator counts.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "fitsum/memory/calibration.h"
#include "fitsum/memory/device_memory.h"
#include "fitsum/model/config.h"
#include "gpu_device.h"

namespace fitsum::test {
namespace {

TEST(CudaMemory, TheProbeLeavesNoCachedMemoryBehind) {
  const auto device = gpu_test_device();
  if (!device) GTEST_SKIP() << "no CUDA device (FITSUM_GPU_TESTS_ON_CPU=1 runs this on the CPU)";
  memory::start_tracking(*device);
  const auto before = memory::read_memory(*device);
  memory::CalibrationOptions options;
  options.max_source_length = 256;
  options.max_target_length = 64;
  const auto calibration = memory::calibrate(model::pegasus_shape("large"), *device, options);
  ASSERT_FALSE(calibration.samples.empty());
  const auto after = memory::read_memory(*device);
  // What stays: cuBLAS's workspace (32 MiB on Hopper, allocated through the caching allocator on first use and kept)
  // and the rest of the segments it and other first-use buffers live in.
  constexpr std::int64_t kFirstUseSlack = 64ll << 20;
  std::printf("reserved before %.1f MiB, after the probe %.1f MiB (the probe's peak reservation %.1f MiB)\n",
              before.reserved_bytes / 1048576.0, after.reserved_bytes / 1048576.0,
              after.peak_reserved_bytes / 1048576.0);
  EXPECT_LE(after.reserved_bytes - before.reserved_bytes, kFirstUseSlack);
  EXPECT_LE(after.current_bytes - before.current_bytes, kFirstUseSlack);
}

}  // namespace
}  // namespace fitsum::test
