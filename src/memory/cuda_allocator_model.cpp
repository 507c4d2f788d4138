// Implements include/fitsum/memory/cuda_allocator_model.h: the caching
// allocator's rounding and segment rules replayed on sizes, and a training run's CUDA memory term by term. The
// rules follow c10/cuda/CUDACachingAllocator.cpp and c10/core/AllocatorConfig.cpp of LibTorch 2.x (the 1.13 rules
// are the same minus expandable_segments); docs/memory.md lists them with their sources.
#include "fitsum/memory/cuda_allocator_model.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <regex>
#include <stdexcept>

#include "fitsum/util/checked_math.h"

namespace fitsum::memory {

namespace {

constexpr std::uint64_t kMiB = 1 << 20;

std::uint64_t divisions_for(std::uint64_t bytes, const CudaAllocConf& conf) {
  const int index = std::clamp(util::floor_log2(bytes) - util::floor_log2(kMiB), 0,
                               static_cast<int>(kCudaRoundUpPowerOfTwoIntervals) - 1);
  return conf.roundup_power2_divisions[static_cast<std::size_t>(index)];
}

// roundup_power2_next_division: the next multiple of (power-of-two floor / divisions).
std::uint64_t round_to_division(std::uint64_t bytes, std::uint64_t divisions) {
  if (util::is_power_of_two(bytes)) return bytes;
  const std::uint64_t floor = std::uint64_t{1} << util::floor_log2(bytes);
  const std::uint64_t step = floor >> util::floor_log2(divisions);
  if (step == 0) return floor << 1;
  const std::uint64_t down = bytes & ~(step - 1);
  return down == bytes ? bytes : down + step;
}

std::uint64_t round_up(std::uint64_t v, std::uint64_t m) { return (v + m - 1) / m * m; }

}  // namespace

std::uint64_t cuda_block_size(std::uint64_t bytes, const CudaAllocConf& conf) {
  if (bytes < kCudaMinBlockSize) return kCudaMinBlockSize;
  const auto divisions = divisions_for(bytes, conf);
  if (divisions > 1 && bytes > kCudaMinBlockSize * divisions) return round_to_division(bytes, divisions);
  return round_up(bytes, kCudaMinBlockSize);
}

std::uint64_t cuda_segment_size(std::uint64_t block_bytes) {
  if (block_bytes <= kCudaSmallSize) return kCudaSmallBuffer;
  if (block_bytes < kCudaMinLargeAlloc) return kCudaLargeBuffer;
  return round_up(block_bytes, kCudaRoundLarge);
}

std::uint64_t cublas_workspace_bytes(const CudaDeviceFacts& device) {
  // LibTorch's parseChosenWorkspaceSize: ":SIZE:COUNT" pairs in KiB, summed; the default depends on the device.
  if (!device.cublas_workspace_config.empty()) {
    static const std::regex pair(":([0-9]+):([0-9]+)");
    std::uint64_t total = 0;
    bool any = false;
    for (std::sregex_iterator it(device.cublas_workspace_config.begin(), device.cublas_workspace_config.end(), pair),
         end;
         it != end; ++it) {
      total += std::stoull((*it)[1]) * 1024 * std::stoull((*it)[2]);
      any = true;
    }
    if (any) return total;
  }
  const bool hopper = device.compute_major == 9 && device.compute_minor == 0;
  return hopper ? 4096ull * 8 * 1024 : 4096ull * 1024 * 2 + 16ull * 1024 * 8;
}

// ---- The allocator replayed ----

const char* to_string(SegmentAction::Kind kind) {
  switch (kind) {
    case SegmentAction::Kind::alloc: return "segment_alloc";
    case SegmentAction::Kind::free: return "segment_free";
    case SegmentAction::Kind::map: return "segment_map";
    case SegmentAction::Kind::unmap: return "segment_unmap";
  }
  return "segment_alloc";
}

namespace {
// An expandable segment reserves address space for the whole device and maps pages as blocks need them.
constexpr std::uint64_t kExpandableAddressSpace = std::uint64_t{1} << 50;
std::uint64_t page_size(bool small) { return small ? kCudaSmallBuffer : kCudaLargeBuffer; }
}  // namespace

CachingAllocatorModel::CachingAllocatorModel(CudaAllocConf conf, std::uint64_t limit)
    : conf_(std::move(conf)), limit_(limit) {}

std::int64_t CachingAllocatorModel::add_block(std::int64_t segment, std::uint64_t offset, std::uint64_t size,
                                              bool small) {
  const auto id = next_block_++;
  blocks_[id] = Block{segment, offset, size, 0, small, false};
  segments_[segment].blocks[offset] = id;
  return id;
}

void CachingAllocatorModel::change_reserved(bool small, std::int64_t delta) {
  reserved_ = static_cast<std::uint64_t>(static_cast<std::int64_t>(reserved_) + delta);
  if (small) small_reserved_ = static_cast<std::uint64_t>(static_cast<std::int64_t>(small_reserved_) + delta);
  peak_reserved_ = std::max(peak_reserved_, reserved_);
}

// get_free_block: the smallest cached block that holds `size`, under the max_split_size rules (a request below
// the limit never takes an oversize block; one above it takes one at most max_non_split_rounding larger).
std::int64_t CachingAllocatorModel::find_free_block(std::uint64_t size, bool small) const {
  const auto& pool = small ? free_small_ : free_large_;
  const auto it = pool.lower_bound(FreeKey{size, std::numeric_limits<std::int64_t>::min(), 0});
  if (it == pool.end()) return -1;
  const auto found = std::get<0>(*it);
  if (!conf_.expandable_segments) {
    if (size < conf_.max_split_size && found >= conf_.max_split_size) return -1;
    if (size >= conf_.max_split_size && found >= size + conf_.max_non_split_rounding) return -1;
  }
  return segments_.at(std::get<1>(*it)).blocks.at(std::get<2>(*it));
}

std::int64_t CachingAllocatorModel::new_segment(std::uint64_t size, bool small) {
  const auto id = next_segment_++;
  auto& segment = segments_[id];
  segment.small = small;
  segment.size = conf_.expandable_segments ? 0 : size;
  const auto block = add_block(id, 0, conf_.expandable_segments ? kExpandableAddressSpace : size, small);
  free_set(small).insert(FreeKey{blocks_[block].size, id, 0});
  if (!conf_.expandable_segments) {
    change_reserved(small, static_cast<std::int64_t>(size));
    actions_.push_back({SegmentAction::Kind::alloc, size});
  }
  return block;
}

// Maps the pages of an expandable segment that `block` covers and that are not mapped yet.
void CachingAllocatorModel::map_pages(const Block& block) {
  auto& segment = segments_[block.segment];
  const auto page = page_size(block.small);
  std::uint64_t mapped = 0;
  for (auto p = block.offset / page; p * page < block.offset + block.size; ++p) {
    if (segment.mapped_pages.insert(p).second) mapped += page;
  }
  if (mapped == 0) return;
  segment.size += mapped;
  change_reserved(block.small, static_cast<std::int64_t>(mapped));
  actions_.push_back({SegmentAction::Kind::map, mapped});
}

// release_cached_blocks: segments holding no allocation go back to the driver (expandable ones unmap the pages
// that no allocation covers).
void CachingAllocatorModel::release_cached_segments() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    auto& segment = it->second;
    if (conf_.expandable_segments) {
      std::set<std::uint64_t> used;
      const auto page = page_size(segment.small);
      for (const auto& [offset, id] : segment.blocks) {
        const auto& b = blocks_[id];
        if (!b.allocated) continue;
        for (auto p = b.offset / page; p * page < b.offset + b.size; ++p) used.insert(p);
      }
      const auto unmapped = segment.size - used.size() * page;
      change_reserved(segment.small, -static_cast<std::int64_t>(unmapped));
      if (unmapped > 0) actions_.push_back({SegmentAction::Kind::unmap, unmapped});
      segment.size = used.size() * page;
      segment.mapped_pages = std::move(used);
      ++it;
      continue;
    }
    const auto only = blocks_[segment.blocks.begin()->second];
    if (segment.blocks.size() == 1 && !only.allocated) {
      free_set(segment.small).erase(FreeKey{only.size, it->first, 0});
      blocks_.erase(segment.blocks.begin()->second);
      change_reserved(segment.small, -static_cast<std::int64_t>(segment.size));
      actions_.push_back({SegmentAction::Kind::free, segment.size});
      it = segments_.erase(it);
    } else {
      ++it;
    }
  }
}

bool CachingAllocatorModel::should_split(const Block& block, std::uint64_t size) const {
  const auto remaining = block.size - size;
  if (block.small || conf_.expandable_segments) return remaining >= kCudaMinBlockSize;
  return size < conf_.max_split_size && remaining > kCudaSmallSize;
}

void CachingAllocatorModel::split(std::int64_t block_id, std::uint64_t size) {
  auto& b = blocks_[block_id];
  const auto rest = add_block(b.segment, b.offset + size, b.size - size, b.small);
  b.size = size;
  const auto& r = blocks_[rest];
  free_set(r.small).insert(FreeKey{r.size, r.segment, r.offset});
}

std::int64_t CachingAllocatorModel::allocate(std::uint64_t bytes) {
  const auto size = cuda_block_size(bytes, conf_);
  const bool small = size <= kCudaSmallSize;
  auto id = conf_.async_backend ? -1 : find_free_block(size, small);
  if (id < 0) {
    // Expandable segments: one per pool, growing page by page; otherwise a segment per get_allocation_size.
    const auto expandable = small ? &expandable_small_ : &expandable_large_;
    const auto need = conf_.expandable_segments ? page_size(small)
                      : conf_.async_backend     ? size
                                                : cuda_segment_size(size);
    if (reserved_ + need > limit_) {
      ++retries_;
      release_cached_segments();
      if (reserved_ + need > limit_) return -1;
    }
    if (conf_.expandable_segments && *expandable >= 0) {
      id = find_free_block(size, small);  // the unmapped tail always fits
    } else {
      id = new_segment(need, small);
      if (conf_.expandable_segments) *expandable = blocks_[id].segment;
    }
  }
  auto& b = blocks_[id];
  free_set(small).erase(FreeKey{b.size, b.segment, b.offset});
  if (!conf_.async_backend && should_split(b, size)) split(id, size);
  auto& block = blocks_[id];
  if (conf_.expandable_segments) map_pages(block);
  block.allocated = true;
  block.requested = bytes;
  requested_ += bytes;
  allocated_ += block.size;
  if (small) small_allocated_ += block.size;
  peak_requested_ = std::max(peak_requested_, requested_);
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return id;
}

void CachingAllocatorModel::mark_free(std::int64_t block_id) {
  auto& b = blocks_[block_id];
  auto& segment = segments_[b.segment];
  // Merge with free neighbours of the same segment (try_merge_blocks).
  const auto merge = [&](std::int64_t other_id) {
    auto& o = blocks_[other_id];
    if (o.allocated) return;
    free_set(o.small).erase(FreeKey{o.size, o.segment, o.offset});
    segment.blocks.erase(o.offset);
    segment.blocks.erase(b.offset);
    b.offset = std::min(b.offset, o.offset);
    b.size += o.size;
    segment.blocks[b.offset] = block_id;
    blocks_.erase(other_id);
  };
  auto it = segment.blocks.find(b.offset);
  if (std::next(it) != segment.blocks.end()) merge(std::next(it)->second);
  it = segment.blocks.find(b.offset);
  if (it != segment.blocks.begin()) merge(std::prev(it)->second);
  free_set(b.small).insert(FreeKey{b.size, b.segment, b.offset});
}

void CachingAllocatorModel::free(std::int64_t handle) {
  auto& b = blocks_.at(handle);
  if (!b.allocated) throw std::logic_error("CachingAllocatorModel::free: block freed twice");
  b.allocated = false;
  requested_ -= b.requested;
  allocated_ -= b.size;
  if (b.small) small_allocated_ -= b.size;
  if (conf_.async_backend) {
    // The driver's pool hands the memory back at the next synchronisation: reserved follows allocated.
    change_reserved(b.small, -static_cast<std::int64_t>(b.size));
    actions_.push_back({SegmentAction::Kind::free, b.size});
    segments_[b.segment].blocks.erase(b.offset);
    segments_.erase(b.segment);
    blocks_.erase(handle);
    return;
  }
  mark_free(handle);
}

// ---- A training run ----

CudaMemoryTerms predict_cuda_memory(const CudaTrainingTensors& t, const CudaAllocConf& conf,
                                    const CudaDeviceFacts& device) {
  CachingAllocatorModel allocator(conf);
  const auto workspace = cublas_workspace_bytes(device);
  // The order of a run: weights at load, cuBLAS's workspace at the first matrix product, gradients in the first
  // backward, optimizer state at the first step; the transient of a later step on top of all of them.
  for (const auto bytes : t.weights) allocator.allocate(bytes);
  allocator.allocate(workspace);
  for (const auto bytes : t.gradients) allocator.allocate(bytes);
  for (const auto bytes : t.optimizer_state) allocator.allocate(bytes);
  if (t.transient > 0) {
    const auto block = t.transient_block > 0 ? std::min(t.transient_block, t.transient) : t.transient;
    for (std::uint64_t done = 0; done < t.transient; done += block) {
      allocator.allocate(std::min(block, t.transient - done));
    }
  }
  CudaMemoryTerms terms;
  terms.requested = allocator.requested_bytes();
  terms.allocated = allocator.allocated_bytes();
  terms.block_rounding = terms.allocated - terms.requested;
  terms.reserved = allocator.reserved_bytes();
  terms.small_pool_slack = allocator.small_pool_reserved_bytes() - allocator.small_pool_allocated_bytes();
  terms.large_segment_slack = terms.reserved - terms.allocated - terms.small_pool_slack;
  terms.cublas_workspace = workspace;
  terms.cuda_context = device.context_bytes > 0 ? device.context_bytes : kCudaContextEstimate;
  terms.device_total = terms.reserved + terms.cuda_context;
  terms.segments = allocator.segments();
  return terms;
}

CudaTrainingTensors training_tensors(const std::vector<std::vector<std::int64_t>>& parameter_shapes,
                                     const std::vector<std::uint64_t>& buffer_bytes, std::uint64_t element_bytes,
                                     optim::OptimizerType optimizer, std::uint64_t transient,
                                     std::uint64_t transient_block) {
  CudaTrainingTensors t;
  for (const auto& shape : parameter_shapes) {
    std::uint64_t numel = 1;
    for (const auto d : shape) numel *= static_cast<std::uint64_t>(d);
    t.weights.push_back(numel * element_bytes);
    t.gradients.push_back(numel * element_bytes);
    for (const auto bytes : optimizer_state_tensors(shape, element_bytes, optimizer))
      t.optimizer_state.push_back(bytes);
  }
  t.weights.insert(t.weights.end(), buffer_bytes.begin(), buffer_bytes.end());
  t.transient = transient;
  t.transient_block = transient_block;
  return t;
}

CudaMemoryTerms predict_cuda_memory(const CudaPlanInputs& inputs, optim::OptimizerType optimizer,
                                    std::int64_t micro_batch, std::int64_t source_length, std::uint64_t transient) {
  // fp32 master weights and gradients, also under bf16 (autocast keeps the weights in fp32).
  const auto& model = inputs.model;
  const auto block = static_cast<std::uint64_t>(micro_batch * source_length * model.d_model) * 4;
  return predict_cuda_memory(
      training_tensors(model.parameter_shapes, model.buffer_bytes, 4, optimizer, transient, block), inputs.conf,
      inputs.device);
}

nlohmann::ordered_json to_json(const CudaMemoryTerms& t) {
  return {{"requested", t.requested},
          {"block_rounding", t.block_rounding},
          {"small_pool_slack", t.small_pool_slack},
          {"large_segment_slack", t.large_segment_slack},
          {"cublas_workspace", t.cublas_workspace},
          {"allocated", t.allocated},
          {"reserved", t.reserved},
          {"cuda_context", t.cuda_context},
          {"device_total", t.device_total},
          {"segments", t.segments}};
}

nlohmann::ordered_json to_json(const CudaAllocConf& c) {
  nlohmann::ordered_json j;
  j["text"] = c.text;
  j["max_split_size_bytes"] =
      c.max_split_size == UINT64_MAX ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.max_split_size);
  j["max_non_split_rounding_bytes"] = c.max_non_split_rounding;
  j["expandable_segments"] = c.expandable_segments;
  j["roundup_power2_divisions"] = c.roundup_power2_divisions;
  j["garbage_collection_threshold"] = c.garbage_collection_threshold;
  j["backend"] = c.async_backend ? "cudaMallocAsync" : "native";
  return j;
}

std::vector<std::uint64_t> optimizer_state_tensors(const std::vector<std::int64_t>& shape, std::uint64_t element_bytes,
                                                   optim::OptimizerType optimizer) {
  std::uint64_t numel = 1;
  for (const auto d : shape) numel *= static_cast<std::uint64_t>(d);
  if (optimizer == optim::OptimizerType::adamw_torch) return {numel * element_bytes, numel * element_bytes};
  // HF Adafactor (beta1=None): fp32 row and column statistics of a matrix, a full fp32 second moment otherwise.
  if (shape.size() >= 2) {
    const auto cols = static_cast<std::uint64_t>(shape.back());
    const auto rows = numel / cols;
    return {rows * 4, cols * 4};
  }
  return {numel * 4};
}

}  // namespace fitsum::memory
