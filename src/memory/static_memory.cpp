// Implements include/fitsum/memory/static_memory.h.
#include "fitsum/memory/static_memory.h"

#include <vector>

#include "fitsum/optim/sharding.h"

namespace fitsum::memory {

const char* to_string(StorageDtype dtype) { return dtype == StorageDtype::fp32 ? "fp32" : "bf16"; }

StaticMemory static_training_memory(const model::ParameterCounts& counts, optim::OptimizerType optimizer,
                                    StorageDtype dtype) {
  const std::uint64_t bytes = dtype == StorageDtype::fp32 ? 4 : 2;
  StaticMemory m;
  m.weights = static_cast<std::uint64_t>(counts.total()) * bytes;
  m.gradients = static_cast<std::uint64_t>(counts.trainable) * bytes;
  if (optimizer == optim::OptimizerType::adamw_torch) {
    m.optimizer_state = 2 * static_cast<std::uint64_t>(counts.trainable) * bytes;
  } else {
    m.optimizer_state = 4 * static_cast<std::uint64_t>(counts.matrix_rows_plus_cols + counts.vector_elements);
  }
  return m;
}

std::vector<std::int64_t> tensor_elements(const model::ParameterCounts& counts) {
  std::vector<std::int64_t> elements;
  for (const auto& t : counts.trainable_tensors) elements.push_back(t.elements);
  return elements;
}

std::uint64_t sharded_optimizer_state(const model::ParameterCounts& counts, optim::OptimizerType optimizer,
                                      StorageDtype dtype, int world_size) {
  if (world_size <= 1) return static_training_memory(counts, optimizer, dtype).optimizer_state;
  const std::uint64_t bytes = dtype == StorageDtype::fp32 ? 4 : 2;
  std::vector<std::uint64_t> state;
  for (const auto& t : counts.trainable_tensors) {
    if (optimizer == optim::OptimizerType::adamw_torch) {
      state.push_back(2 * static_cast<std::uint64_t>(t.elements) * bytes);
    } else {  // factored for matrices, full for vectors, fp32
      state.push_back(4 * static_cast<std::uint64_t>(t.rows_plus_cols > 0 ? t.rows_plus_cols : t.elements));
    }
  }
  return optim::largest_share(tensor_elements(counts), state, world_size);
}

std::uint64_t sharded_gradients(const model::ParameterCounts& counts, int world_size, std::int64_t bucket_bytes) {
  return optim::sharded_gradient_bytes(tensor_elements(counts), world_size, bucket_bytes);
}

}  // namespace fitsum::memory
