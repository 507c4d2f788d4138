// Implements include/fitsum/memory/static_memory.h.
#include "fitsum/memory/static_memory.h"

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

}  // namespace fitsum::memory
