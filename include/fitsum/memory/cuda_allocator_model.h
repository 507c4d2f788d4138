// What a training run reserves on a CUDA device, from the tensors it allocates: a model of LibTorch's caching
// allocator (c10/cuda/CUDACachingAllocator.cpp) and of the memory around it.
//
// The planner predicts the bytes tensors ask for. On CUDA the budget caps what the caching allocator *reserves*
// (its memory fraction), which is more: every block is rounded (512 B, or a power-of-two division with
// roundup_power2_divisions), requests of at most 1 MiB are carved out of 2 MiB segments, requests below 10 MiB out
// of 20 MiB segments, larger ones get their own segment rounded to 2 MiB; a free block is split only under the
// pool's rules (max_split_size_mb), expandable_segments maps pages of one growing segment instead. cuBLAS keeps a
// workspace allocated through the same allocator; the CUDA context holds memory outside it. Each of those is a
// named term here (CudaMemoryTerms), with its source in docs/memory.md.
//
// The model replays allocations through a simulated allocator (one stream, no CUDA graphs, no garbage-collection
// threshold), so it is exact for a given order of allocations and frees; what it cannot know is the order in which
// a real backward pass frees its activations (that fragmentation is measured on a GPU by bench/gpu.sh).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fitsum/optim/optimizers.h"
#include "fitsum/util/cuda_alloc_conf.h"

namespace fitsum::memory {

// The caching allocator's constants (CUDACachingAllocator.cpp).
constexpr std::uint64_t kCudaMinBlockSize = 512;        // every block is a multiple of this
constexpr std::uint64_t kCudaSmallSize = 1 << 20;       // requests up to 1 MiB use the small pool
constexpr std::uint64_t kCudaSmallBuffer = 2 << 20;     // the small pool's segments (and pages)
using util::kCudaLargeBuffer;                           // large-pool segments for requests below 10 MiB
constexpr std::uint64_t kCudaMinLargeAlloc = 10 << 20;  // from here a request gets its own segment
constexpr std::uint64_t kCudaRoundLarge = 2 << 20;      // ... rounded up to 2 MiB
using util::kCudaRoundUpPowerOfTwoIntervals;

// The allocator's settings (PYTORCH_CUDA_ALLOC_CONF), parsed in util/cuda_alloc_conf.h.
using util::CudaAllocConf;

// The block size a request of `bytes` occupies (round_size) and the segment cudaMalloc'ed when no cached block
// fits (get_allocation_size).
std::uint64_t cuda_block_size(std::uint64_t bytes, const CudaAllocConf& conf);
std::uint64_t cuda_segment_size(std::uint64_t block_bytes);

// A segment action of the allocator, as its history names one: a segment taken from the driver (cudaMalloc) or
// given back, or pages of an expandable segment mapped or unmapped, with the bytes.
struct SegmentAction {
  enum class Kind { alloc, free, map, unmap };
  Kind kind = Kind::alloc;
  std::uint64_t bytes = 0;
  bool operator==(const SegmentAction& o) const { return kind == o.kind && bytes == o.bytes; }
};
// The history's names: segment_alloc, segment_free, segment_map, segment_unmap.
const char* to_string(SegmentAction::Kind kind);

// The caching allocator replayed on sizes: one device, one stream. allocate() returns a handle for free(), or -1
// when the segment it needs would take reserved memory past `limit` even after the cached free segments are
// released (the out-of-memory case; counted in retries first, as the allocator does).
class CachingAllocatorModel {
 public:
  explicit CachingAllocatorModel(CudaAllocConf conf, std::uint64_t limit = UINT64_MAX);

  std::int64_t allocate(std::uint64_t bytes);
  void free(std::int64_t handle);
  // torch.cuda.empty_cache(): the segments that hold no allocation go back to the driver.
  void release_cached() { release_cached_segments(); }
  // The segment actions since the last call, in the order the model took them.
  std::vector<SegmentAction> take_segment_actions() { return std::exchange(actions_, {}); }

  std::uint64_t requested_bytes() const { return requested_; }  // what the live tensors asked for
  std::uint64_t allocated_bytes() const { return allocated_; }  // their blocks (max_memory_allocated's unit)
  std::uint64_t reserved_bytes() const { return reserved_; }    // segments or mapped pages (max_memory_reserved)
  std::uint64_t peak_requested_bytes() const { return peak_requested_; }
  std::uint64_t peak_allocated_bytes() const { return peak_allocated_; }
  std::uint64_t peak_reserved_bytes() const { return peak_reserved_; }
  std::uint64_t small_pool_allocated_bytes() const { return small_allocated_; }
  std::uint64_t small_pool_reserved_bytes() const { return small_reserved_; }
  std::int64_t segments() const { return static_cast<std::int64_t>(segments_.size()); }
  std::int64_t retries() const { return retries_; }

 private:
  struct Block {
    std::int64_t segment = 0;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
    std::uint64_t requested = 0;
    bool small = false;
    bool allocated = false;
  };
  struct Segment {
    std::uint64_t size = 0;                        // reserved bytes (for an expandable segment: its mapped pages)
    std::map<std::uint64_t, std::int64_t> blocks;  // offset -> block
    std::set<std::uint64_t> mapped_pages;          // expandable segments only
    bool small = false;
  };
  using FreeKey = std::tuple<std::uint64_t, std::int64_t, std::uint64_t>;  // size, segment, offset

  std::set<FreeKey>& free_set(bool small) { return small ? free_small_ : free_large_; }
  std::int64_t find_free_block(std::uint64_t size, bool small) const;
  std::int64_t new_segment(std::uint64_t size, bool small);
  std::int64_t add_block(std::int64_t segment, std::uint64_t offset, std::uint64_t size, bool small);
  void release_cached_segments();
  void map_pages(const Block& block);
  bool should_split(const Block& block, std::uint64_t size) const;
  void split(std::int64_t block_id, std::uint64_t size);
  void mark_free(std::int64_t block_id);
  void change_reserved(bool small, std::int64_t delta);

  CudaAllocConf conf_;
  std::uint64_t limit_;
  std::map<std::int64_t, Block> blocks_;
  std::map<std::int64_t, Segment> segments_;
  std::set<FreeKey> free_small_, free_large_;
  std::int64_t next_block_ = 0, next_segment_ = 0, retries_ = 0;
  std::int64_t expandable_small_ = -1, expandable_large_ = -1;
  std::vector<SegmentAction> actions_;
  std::uint64_t requested_ = 0, allocated_ = 0, reserved_ = 0, small_allocated_ = 0, small_reserved_ = 0;
  std::uint64_t peak_requested_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
};

// ---- A training run's CUDA memory, term by term ----

// What the device adds around the allocator. cuBLAS's workspace: CUBLAS_WORKSPACE_CONFIG (":SIZE_KiB:COUNT" pairs)
// or LibTorch's default, 32 MiB on Hopper (compute capability 9.0) and 4096 KiB x 2 + 16 KiB x 8 elsewhere,
// allocated once per handle and stream through the caching allocator (cuBLASLt shares it). The context (driver
// state, kernel images of LibTorch, cuBLAS and cuDNN loaded lazily) is outside the allocator and its budget.
struct CudaDeviceFacts {
  int compute_major = 9;  // H100 / H200
  int compute_minor = 0;
  std::string cublas_workspace_config;  // CUBLAS_WORKSPACE_CONFIG, empty for LibTorch's default
  std::uint64_t context_bytes = 0;      // measured on the device when known; 0 uses kCudaContextEstimate
};
// A CUDA 12/13 context with LibTorch, cuBLAS and cuDNN loaded lazily (CUDA_MODULE_LOADING=LAZY, the default):
// an estimate, to be replaced by a measurement on the device (cudaMemGetInfo's used minus reserved).
constexpr std::uint64_t kCudaContextEstimate = 512ull << 20;

std::uint64_t cublas_workspace_bytes(const CudaDeviceFacts& device);

// The tensors of a training step, as sizes in bytes, in the order they are allocated.
struct CudaTrainingTensors {
  std::vector<std::uint64_t> weights;          // parameters and buffers, in registration order
  std::vector<std::uint64_t> gradients;        // one per trainable parameter
  std::vector<std::uint64_t> optimizer_state;  // AdamW: two per parameter; Adafactor: rows and columns, or full
  // The larger micro-step or optimizer-step transient, replayed as blocks of `transient_block` bytes (a
  // hidden-state activation, B x S x d_model) plus one remainder: the planner knows its total, not its tensors.
  std::uint64_t transient = 0;
  std::uint64_t transient_block = 0;
};

// The tensors of one configuration from the model's trainable parameter shapes (registration order) and buffer
// sizes: weights and gradients of `element_bytes` (4 with fp32 master weights, also under --bf16), the optimizer's
// state per parameter, and the transient as the planner predicts it.
CudaTrainingTensors training_tensors(const std::vector<std::vector<std::int64_t>>& parameter_shapes,
                                     const std::vector<std::uint64_t>& buffer_bytes, std::uint64_t element_bytes,
                                     optim::OptimizerType optimizer, std::uint64_t transient,
                                     std::uint64_t transient_block);

// Sizes of the optimizer state tensors of one parameter of `shape` (elements of fp32 or the parameter dtype).
std::vector<std::uint64_t> optimizer_state_tensors(const std::vector<std::int64_t>& shape, std::uint64_t element_bytes,
                                                   optim::OptimizerType optimizer);

// Each term is bytes; reserved = requested + block_rounding + small_pool_slack + large_segment_slack (segment
// and page rounding beyond the blocks, including cached blocks that did not fit a later request); the cuBLAS
// workspace is part of requested; the context is outside reserved.
struct CudaMemoryTerms {
  std::uint64_t requested = 0;            // what the tensors ask for (the CPU planner's peak, plus the workspace)
  std::uint64_t block_rounding = 0;       // 512 B blocks or roundup_power2_divisions
  std::uint64_t small_pool_slack = 0;     // unused bytes of the 2 MiB small-pool segments at the peak
  std::uint64_t large_segment_slack = 0;  // unused bytes of 20 MiB / 2 MiB-rounded segments (or mapped pages)
  std::uint64_t cublas_workspace = 0;
  std::uint64_t cuda_context = 0;
  std::uint64_t allocated = 0;     // requested + block_rounding: torch.cuda.max_memory_allocated
  std::uint64_t reserved = 0;      // torch.cuda.max_memory_reserved: what the budget caps
  std::uint64_t device_total = 0;  // reserved + context: what nvidia-smi shows for the process
  std::int64_t segments = 0;
};

CudaMemoryTerms predict_cuda_memory(const CudaTrainingTensors& tensors, const CudaAllocConf& conf,
                                    const CudaDeviceFacts& device);

// A plan on CUDA: the model's tensors, the allocator's settings and the device.
struct CudaModelTensors {
  std::vector<std::vector<std::int64_t>> parameter_shapes;  // trainable, in registration order
  std::vector<std::uint64_t> buffer_bytes;
  std::int64_t d_model = 0;
};
struct CudaPlanInputs {
  CudaModelTensors model;
  CudaAllocConf conf;
  CudaDeviceFacts device;
};
// One candidate's terms: its optimizer's state, and the planner's predicted transient (the larger of activations and
// the optimizer step's) replayed as blocks of one hidden state (micro_batch x source x d_model x 4 bytes).
CudaMemoryTerms predict_cuda_memory(const CudaPlanInputs& inputs, optim::OptimizerType optimizer,
                                    std::int64_t micro_batch, std::int64_t source_length, std::uint64_t transient);

// The terms under their names (docs/memory.md), for the plan's JSON breakdown.
nlohmann::ordered_json to_json(const CudaMemoryTerms& terms);
// The configuration as the plan reports it: the text given and what the model took from it.
nlohmann::ordered_json to_json(const CudaAllocConf& conf);

}  // namespace fitsum::memory
