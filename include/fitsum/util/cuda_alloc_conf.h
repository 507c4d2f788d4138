// PYTORCH_CUDA_ALLOC_CONF, the CUDA caching allocator's settings (fitsum's --cuda_alloc_conf), parsed once into a
// typed value: the runtime (util/runtime.h) sets it before CUDA starts and the planner's CUDA model
// (memory/cuda_allocator_model.h) predicts reserved memory under it. Parsed as c10/cuda/CUDAAllocatorConfig.cpp
// (c10/core/AllocatorConfig.cpp from 2.8) parses it, so that anything LibTorch would reject fails here first, in
// one line, before the device is touched.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace fitsum::util {

constexpr std::uint64_t kCudaLargeBuffer = 20 << 20;         // the allocator's 20 MiB large-pool segments
constexpr std::size_t kCudaRoundUpPowerOfTwoIntervals = 16;  // 1 MiB .. 64 GiB, one entry per power of two

// The keys that change reserved memory; the other keys the allocator knows (pinned_*, release_lock_on_cudamalloc,
// graph_capture_record_stream_reuse) are accepted and change nothing on the device.
struct CudaAllocConf {
  std::uint64_t max_split_size = UINT64_MAX;  // max_split_size_mb, in bytes; unlimited by default
  // max_non_split_rounding_mb: how much larger than a request (at or above max_split_size) a cached block may be
  std::uint64_t max_non_split_rounding = kCudaLargeBuffer;
  bool expandable_segments = false;
  bool async_backend = false;  // backend:cudaMallocAsync: the driver's pool, none of the caching rules
  // roundup_power2_divisions per power-of-two interval of the request (index 0: below 2 MiB, 15: 32 GiB and up);
  // 0 or 1 means plain 512-byte rounding.
  std::array<std::uint64_t, kCudaRoundUpPowerOfTwoIntervals> roundup_power2_divisions{};
  double garbage_collection_threshold = 0.0;
  std::string text;  // as given
};

// Throws std::invalid_argument naming `what` (the field or variable the text came from), the key and the format.
CudaAllocConf parse_cuda_alloc_conf(const std::string& text, const std::string& what = "cuda_alloc_conf");

}  // namespace fitsum::util
