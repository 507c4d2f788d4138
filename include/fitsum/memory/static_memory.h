// The memory that training needs before any activation: weights, gradients and optimizer state, computed from
// parameter counts alone. These are the first numbers of the out-of-memory story (a 568M-parameter PEGASUS needs
// 9.1 GB for them with AdamW in fp32); the memory planner adds activations on top.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fitsum/model/config.h"
#include "fitsum/optim/optimizers.h"

namespace fitsum::memory {

enum class StorageDtype { fp32, bf16 };

const char* to_string(StorageDtype dtype);

struct StaticMemory {
  std::uint64_t weights = 0;    // trainable parameters plus stored buffers
  std::uint64_t gradients = 0;  // one per trainable parameter
  std::uint64_t optimizer_state = 0;
  std::uint64_t total() const { return weights + gradients + optimizer_state; }
};

// `dtype` is how weights and gradients are stored. AdamW (torch.optim.AdamW) keeps exp_avg and exp_avg_sq in the
// parameter dtype; HF's Adafactor (beta1=None, as optim="adafactor" sets) keeps a factored second moment
// (rows + columns) for matrices and a full one for vectors, always in fp32 (it upcasts bf16 parameters).
// Mixed precision with fp32 master weights (fitsum's --bf16) stores everything as fp32.
StaticMemory static_training_memory(const model::ParameterCounts& counts, optim::OptimizerType optimizer,
                                    StorageDtype dtype);

// The element count of each trainable tensor, in order: what ZeRO's partition (optim/sharding.h) is computed from.
std::vector<std::int64_t> tensor_elements(const model::ParameterCounts& counts);

// The optimizer state of the process with the largest share when `world_size` processes shard it by tensor (ZeRO
// stage 1, optim/sharding.h); the whole state for one process.
std::uint64_t sharded_optimizer_state(const model::ParameterCounts& counts, optim::OptimizerType optimizer,
                                      StorageDtype dtype, int world_size);
// ZeRO stage 2's gradients per process (optim::sharded_gradient_bytes), float32.
std::uint64_t sharded_gradients(const model::ParameterCounts& counts, int world_size, std::int64_t bucket_bytes);

}  // namespace fitsum::memory
