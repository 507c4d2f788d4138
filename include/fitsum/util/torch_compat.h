// Small helpers that hide the API differences between Debian's LibTorch 1.13 and the LibTorch of PyTorch 2.x.
// Everything version-dependent goes through here, so the rest of the code compiles unchanged on both.
#pragma once

#include <torch/version.h>

#include <utility>

#define FITSUM_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// at::scaled_dot_product_attention with a `scale` argument (fused flash / memory-efficient kernels) since 2.1.
#define FITSUM_HAS_SDPA FITSUM_TORCH_AT_LEAST(2, 1)
// at::_fused_adamw_ (torch.optim.AdamW(fused=True)) with CUDA and CPU kernels since 2.4 (CUDA only from 2.0).
#define FITSUM_HAS_FUSED_ADAMW FITSUM_TORCH_AT_LEAST(2, 4)
// Whether attention holds its (T, S) scores and probabilities: fitsum's math path (1.13) does; the fused kernels
// behind scaled_dot_product_attention (CPU flash attention, CUDA flash / memory-efficient) work in blocks and keep
// none (measured on the CPU with 2.14: tests/model/evaluation_memory_test.cpp).
#define FITSUM_ATTENTION_KEEPS_SCORES (!FITSUM_HAS_SDPA)

// c10::Allocator::allocate is const up to 2.2 and not from 2.3 (pytorch/pytorch#120969), which also made
// copy_data a pure virtual of every allocator. An allocator subclass declares
//     c10::DataPtr allocate(size_t bytes) FITSUM_ALLOCATE_CONST override;
// and, under FITSUM_ALLOCATOR_HAS_COPY_DATA, copy_data.
#if FITSUM_TORCH_AT_LEAST(2, 3)
#define FITSUM_ALLOCATE_CONST
#define FITSUM_ALLOCATOR_HAS_COPY_DATA 1
#else
#define FITSUM_ALLOCATE_CONST const
#define FITSUM_ALLOCATOR_HAS_COPY_DATA 0
#endif

// The caching allocator's statistics are arrays indexed by StatType, whose AGGREGATE is 0 in every version; the
// enum itself lives in c10::cuda::CUDACachingAllocator in 1.13 and in c10::CachingAllocator in recent 2.x.
#define FITSUM_CUDA_AGGREGATE_STAT 0

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/autograd/variable.h>

namespace fitsum::util {

// Whether torch.autocast is on for `device` in this thread.
bool autocast_enabled(c10::DeviceType device);

// Mixed precision for the scope of the guard: matrix products run in `dtype` (bf16) on `device`, reductions and
// the weights stay float32 (torch.autocast). LibTorch 2.4 renamed the per-device switches; both spellings are here.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool enabled_;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::BFloat16;
};

// A trainable leaf's gradient accumulator, the autograd node that adds each backward's gradient into .grad (and runs
// the post-hooks added to it): torch::autograd::impl::grad_accumulator returns a std::shared_ptr in 1.13 and a
// c10::intrusive_ptr in recent 2.x. The tensor holds it weakly: whoever keeps one keeps the node and its hooks.
using GradAccumulator = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

}  // namespace fitsum::util
