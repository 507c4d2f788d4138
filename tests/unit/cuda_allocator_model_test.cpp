// The CUDA caching-allocator model (include/fitsum/memory/cuda_allocator_model.h) against sizes worked out by hand
// from the rules of c10/cuda/CUDACachingAllocator.cpp: block rounding, segment sizes, splitting, max_split_size,
// expandable segments, the retry under a memory limit, PYTORCH_CUDA_ALLOC_CONF parsing and the named terms.
#include <gtest/gtest.h>

#include "fitsum/memory/cuda_allocator_model.h"

namespace fitsum::memory {
namespace {

constexpr std::uint64_t KiB = 1024, MiB = 1024 * 1024;

TEST(CudaAllocatorModel, BlocksRoundTo512BytesOrToPowerOfTwoDivisions) {
  const CudaAllocConf plain;
  EXPECT_EQ(cuda_block_size(1, plain), 512u);
  EXPECT_EQ(cuda_block_size(512, plain), 512u);
  EXPECT_EQ(cuda_block_size(513, plain), 1024u);
  EXPECT_EQ(cuda_block_size(MiB + 1, plain), MiB + 512);
  const auto four = util::parse_cuda_alloc_conf("roundup_power2_divisions:4");
  // 1.3 MiB: floor 1 MiB in steps of 256 KiB -> 1.5 MiB; 5 MiB + 1: floor 4 MiB in steps of 1 MiB -> 6 MiB.
  EXPECT_EQ(cuda_block_size(1363149, four), 3 * MiB / 2);
  EXPECT_EQ(cuda_block_size(5 * MiB + 1, four), 6 * MiB);
  EXPECT_EQ(cuda_block_size(4 * MiB, four), 4 * MiB);  // a power of two stays
  EXPECT_EQ(cuda_block_size(1000, four), 1024u);       // at most 512 x divisions: plain rounding
}

TEST(CudaAllocatorModel, SegmentsAre2MiBSmall20MiBMediumOrRoundedTo2MiB) {
  EXPECT_EQ(cuda_segment_size(512), 2 * MiB);
  EXPECT_EQ(cuda_segment_size(MiB), 2 * MiB);
  EXPECT_EQ(cuda_segment_size(MiB + 512), 20 * MiB);
  EXPECT_EQ(cuda_segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(cuda_segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(cuda_segment_size(11 * MiB + 512), 12 * MiB);
}

TEST(CudaAllocatorModel, ParsesTheAllocatorConfiguration) {
  const auto c =
      util::parse_cuda_alloc_conf("expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6");
  EXPECT_TRUE(c.expandable_segments);
  EXPECT_EQ(c.max_split_size, 128 * MiB);
  EXPECT_DOUBLE_EQ(c.garbage_collection_threshold, 0.6);
  const auto d = util::parse_cuda_alloc_conf("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  // Intervals are powers of two of MiB: 256 MiB is index 8, the first value also covers the ones below it.
  for (std::size_t i = 0; i <= 8; ++i) EXPECT_EQ(d.roundup_power2_divisions[i], 1u) << i;
  EXPECT_EQ(d.roundup_power2_divisions[9], 2u);
  EXPECT_EQ(d.roundup_power2_divisions[10], 4u);
  for (std::size_t i = 11; i < kCudaRoundUpPowerOfTwoIntervals; ++i) EXPECT_EQ(d.roundup_power2_divisions[i], 8u);
  EXPECT_TRUE(util::parse_cuda_alloc_conf("backend:cudaMallocAsync").async_backend);
  EXPECT_EQ(util::parse_cuda_alloc_conf("").max_split_size, UINT64_MAX);
}

TEST(CudaAllocatorModel, RejectsWhatTheAllocatorRejectsNamingTheKey) {
  const auto message = [](const std::string& text) {
    try {
      util::parse_cuda_alloc_conf(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("max_split_size_mb:20").find("max_split_size_mb must be above 20"), std::string::npos);
  EXPECT_NE(message("expandable_segment:True").find("unknown key 'expandable_segment'"), std::string::npos);
  EXPECT_NE(message("expandable_segments:maybe").find("True or False"), std::string::npos);
  EXPECT_NE(message("roundup_power2_divisions:3").find("power of two"), std::string::npos);
  EXPECT_NE(message("expandable_segments").find("expected ':'"), std::string::npos);
}

TEST(CudaAllocatorModel, MediumRequestsShareTwentyMiBSegments) {
  CachingAllocatorModel a{CudaAllocConf{}};
  for (int i = 0; i < 5; ++i) a.allocate(4 * MiB);
  EXPECT_EQ(a.reserved_bytes(), 20 * MiB);
  EXPECT_EQ(a.segments(), 1);
  a.allocate(4 * MiB);
  EXPECT_EQ(a.reserved_bytes(), 40 * MiB);
  EXPECT_EQ(a.allocated_bytes(), 24 * MiB);
}

TEST(CudaAllocatorModel, SmallRequestsPackIntoTwoMiBSegments) {
  CachingAllocatorModel a{CudaAllocConf{}};
  for (int i = 0; i < 100; ++i) a.allocate(1000);
  EXPECT_EQ(a.requested_bytes(), 100000u);
  EXPECT_EQ(a.allocated_bytes(), 100 * KiB);
  EXPECT_EQ(a.reserved_bytes(), 2 * MiB);
  EXPECT_EQ(a.small_pool_reserved_bytes(), 2 * MiB);
}

TEST(CudaAllocatorModel, FreedBlocksAreReusedAndMerged) {
  CachingAllocatorModel a{CudaAllocConf{}};
  const auto x = a.allocate(4 * MiB);
  const auto y = a.allocate(4 * MiB);
  a.free(x);
  a.free(y);
  a.allocate(12 * MiB);  // fits the merged 20 MiB segment: no new one
  EXPECT_EQ(a.reserved_bytes(), 20 * MiB);
  EXPECT_EQ(a.peak_allocated_bytes(), 12 * MiB);
}

TEST(CudaAllocatorModel, MaxSplitSizeKeepsOversizeBlocksWhole) {
  CachingAllocatorModel plain{CudaAllocConf{}};
  plain.free(plain.allocate(64 * MiB));
  plain.allocate(8 * MiB);  // split out of the cached 64 MiB block
  EXPECT_EQ(plain.reserved_bytes(), 64 * MiB);
  CachingAllocatorModel capped{util::parse_cuda_alloc_conf("max_split_size_mb:32")};
  capped.free(capped.allocate(64 * MiB));
  capped.allocate(8 * MiB);  // below the limit: never takes an oversize block, gets a new 20 MiB segment
  EXPECT_EQ(capped.reserved_bytes(), 84 * MiB);
  capped.allocate(60 * MiB);  // above the limit: the cached 64 MiB block is within 20 MiB of it, taken whole
  EXPECT_EQ(capped.reserved_bytes(), 84 * MiB);
  EXPECT_EQ(capped.allocated_bytes(), 72 * MiB);  // 8 MiB split out of its segment, the 64 MiB block unsplit
}

TEST(CudaAllocatorModel, ExpandableSegmentsMapPagesOfOneSegment) {
  CachingAllocatorModel segments{CudaAllocConf{}};
  segments.free(segments.allocate(12 * MiB));
  segments.allocate(14 * MiB);  // the cached 12 MiB segment is too small: a second one
  EXPECT_EQ(segments.reserved_bytes(), 26 * MiB);
  CachingAllocatorModel expandable{util::parse_cuda_alloc_conf("expandable_segments:True")};
  expandable.free(expandable.allocate(12 * MiB));
  expandable.allocate(14 * MiB);  // grows in place: still one 20 MiB page
  EXPECT_EQ(expandable.reserved_bytes(), 20 * MiB);
  for (int i = 0; i < 2; ++i) expandable.allocate(12 * MiB);  // 38 MiB in use -> two pages
  EXPECT_EQ(expandable.reserved_bytes(), 40 * MiB);
}

TEST(CudaAllocatorModel, ReleasesCachedSegmentsAndRetriesUnderALimit) {
  CachingAllocatorModel a{CudaAllocConf{}, 40 * MiB};
  a.free(a.allocate(30 * MiB));
  EXPECT_GE(a.allocate(36 * MiB), 0);  // 30 + 36 > 40: the cached segment goes back, then it fits
  EXPECT_EQ(a.retries(), 1);
  EXPECT_EQ(a.reserved_bytes(), 36 * MiB);
  EXPECT_EQ(a.peak_reserved_bytes(), 36 * MiB);
  EXPECT_EQ(a.allocate(10 * MiB), -1);  // nothing left to release: out of memory
}

TEST(CudaAllocatorModel, CublasWorkspaceFollowsTheDeviceAndTheEnvironment) {
  EXPECT_EQ(cublas_workspace_bytes(CudaDeviceFacts{9, 0, "", 0}), 32 * MiB);
  EXPECT_EQ(cublas_workspace_bytes(CudaDeviceFacts{8, 0, "", 0}), 8 * MiB + 128 * KiB);
  EXPECT_EQ(cublas_workspace_bytes(CudaDeviceFacts{9, 0, ":4096:2:16:8", 0}), 8 * MiB + 128 * KiB);
  EXPECT_EQ(cublas_workspace_bytes(CudaDeviceFacts{9, 0, ":16:8", 0}), 128 * KiB);
}

TEST(CudaAllocatorModel, OptimizerStateTensorsPerParameter) {
  EXPECT_EQ(optimizer_state_tensors({3, 5}, 4, optim::OptimizerType::adamw_torch),
            (std::vector<std::uint64_t>{60, 60}));
  EXPECT_EQ(optimizer_state_tensors({3, 5}, 4, optim::OptimizerType::adafactor), (std::vector<std::uint64_t>{12, 20}));
  EXPECT_EQ(optimizer_state_tensors({7}, 2, optim::OptimizerType::adafactor), (std::vector<std::uint64_t>{28}));
}

TEST(CudaAllocatorModel, TrainingTermsAddUpToReserved) {
  CudaTrainingTensors t;
  t.weights = std::vector<std::uint64_t>(5, 4 * MiB);  // one 20 MiB segment
  t.weights.push_back(4000);                           // small pool: 4096 bytes of one 2 MiB segment
  t.transient = 50 * MiB;                              // 3 blocks of 16 MiB (own segments), 2 MiB in a 20 MiB one
  t.transient_block = 16 * MiB;
  const auto terms = predict_cuda_memory(t, CudaAllocConf{}, CudaDeviceFacts{9, 0, "", 0});
  EXPECT_EQ(terms.cublas_workspace, 32 * MiB);
  EXPECT_EQ(terms.requested, 20 * MiB + 4000 + 32 * MiB + 50 * MiB);
  EXPECT_EQ(terms.block_rounding, 96u);
  EXPECT_EQ(terms.small_pool_slack, 2 * MiB - 4096);
  // Segments: 20 (weights) + 2 (small) + 32 (workspace) + 3 x 16 + 20 (for the 2 MiB remainder) = 122 MiB.
  EXPECT_EQ(terms.reserved, 122 * MiB);
  EXPECT_EQ(terms.large_segment_slack, 18 * MiB);
  EXPECT_EQ(terms.segments, 7);
  EXPECT_EQ(terms.reserved,
            terms.requested + terms.block_rounding + terms.small_pool_slack + terms.large_segment_slack);
  EXPECT_EQ(terms.device_total, terms.reserved + kCudaContextEstimate);
}

}  // namespace
}  // namespace fitsum::memory
