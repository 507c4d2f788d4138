// ZeRO stage 1 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", the
// DeepSpeed paper): with several processes, each keeps the optimizer state of a share of the parameters and updates
// only those; the updated parameters then travel from their owner to the others. The shares are whole tensors, as
// torch.distributed.optim.ZeroRedundancyOptimizer partitions them, so an update is exactly the one a single process
// computes and the name-keyed optimizer state (optimizers.h) needs no re-slicing: a checkpoint written by N
// processes resumes on M.
#pragma once

#include <cstdint>
#include <vector>

namespace fitsum::optim {

// The owner (0 .. world_size - 1) of each tensor, given their element counts: largest first, each to the process
// with the fewest elements so far (the lowest rank on a tie). Depends only on the counts and their order, so every
// process computes the same partition; the largest share is at most the balanced share plus the largest tensor.
std::vector<int> partition_by_size(const std::vector<std::int64_t>& elements, int world_size);

// After each update under ZeRO stage 1 the tensors travel from their owners: a tensor of this size or more alone,
// in place; smaller ones together, through a buffer of at most this size (the step's only extra memory).
constexpr std::int64_t kBroadcastBucketBytes = std::int64_t{4} << 20;

// An upper bound of that buffer for float32 tensors of `elements` partitioned over `world_size` processes: the
// smaller of a bucket and the largest share of the tensors below a bucket's size (exact when no share's small
// tensors need a second bucket). 0 for one process.
std::uint64_t largest_broadcast_bucket(const std::vector<std::int64_t>& elements, int world_size);

// The largest total of `bytes` over the processes' shares, for the partition of `elements` above (the memory
// planner's per-process optimizer state under ZeRO stage 1).
std::uint64_t largest_share(const std::vector<std::int64_t>& elements, const std::vector<std::uint64_t>& bytes,
                            int world_size);

// The gradients are summed over the processes (train/gradient_reducer.h) in buckets of this size by default
// (HF's ddp_bucket_cap_mb, DDP's 25 MiB).
constexpr std::int64_t kReduceBucketBytes = std::int64_t{25} << 20;

// The float32 gradient bytes a process holds under ZeRO stage 2, for the partition of `elements` above.
struct ShardedGradients {
  std::uint64_t share = 0;  // the sums of its share, held throughout (one process: every gradient)
  // During a backward only, besides the share: the gradients not yet summed, at most the two largest tensors
  // (gradients written in place, the shared embedding's and an untied LM head's, are summed once the backward is
  // over) and two buckets (one filling, one being summed), never more than every gradient ...
  std::uint64_t in_flight = 0;
  // ... and, while a bucket of several tensors is packed, its buffer beside its members (largest_packed_bucket).
  std::uint64_t packed = 0;
};
ShardedGradients sharded_gradients_of(const std::vector<std::int64_t>& elements, int world_size,
                                      std::int64_t bucket_bytes);

// share + in_flight: the most a process holds besides the packing, as a bound before any probe. Where two buckets
// hold most of a model's gradients (small models, large buckets), that is the share's sums on top of every gradient:
// more than stage 0's.
std::uint64_t sharded_gradient_bytes(const std::vector<std::int64_t>& elements, int world_size,
                                     std::int64_t bucket_bytes);

// The largest bucket of several tensors (filled as train/gradient_reducer.h fills them): its packed buffer is
// allocated while its members' gradients are still held. A tensor alone in its bucket is summed in place.
std::uint64_t largest_packed_bucket(const std::vector<std::int64_t>& elements, std::int64_t bucket_bytes);

}  // namespace fitsum::optim
