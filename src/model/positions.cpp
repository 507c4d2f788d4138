// Implements the position embeddings of include/fitsum/model/seq2seq.h: PEGASUS's sinusoidal table and BART's
// learned one (HF PegasusSinusoidalPositionalEmbedding, BartLearnedPositionalEmbedding).
#include <cmath>

#include <torch/torch.h>

#include "fitsum/model/seq2seq.h"

namespace fitsum::model {

torch::Tensor sinusoidal_table(std::int64_t positions, std::int64_t dim) {
  // Double precision as HF's numpy code, then float32.
  auto table = torch::empty({positions, dim}, torch::kFloat64);
  auto t = table.accessor<double, 2>();
  const std::int64_t half = dim % 2 == 0 ? dim / 2 : dim / 2 + 1;
  for (std::int64_t pos = 0; pos < positions; ++pos) {
    for (std::int64_t j = 0; j < dim; ++j) {
      const double angle = static_cast<double>(pos) / std::pow(10000.0, 2.0 * static_cast<double>(j / 2) / dim);
      // Even features (sin) fill the first half, odd features (cos) the second.
      if (j % 2 == 0) {
        t[pos][j / 2] = std::sin(angle);
      } else {
        t[pos][half + j / 2] = std::cos(angle);
      }
    }
  }
  return table.to(torch::kFloat32);
}

PositionalEmbeddingImpl::PositionalEmbeddingImpl(const ModelConfig& c) : max_positions_(c.max_position_embeddings) {
  if (c.position_embedding == PositionEmbedding::sinusoidal) {
    offset_ = 0;
    weight = register_buffer("weight", sinusoidal_table(c.max_position_embeddings, c.d_model));
  } else {
    offset_ = c.learned_position_offset;
    weight = register_parameter("weight", torch::zeros({c.max_position_embeddings + offset_, c.d_model}));
  }
}

torch::Tensor PositionalEmbeddingImpl::forward(std::int64_t length, std::int64_t past_length) {
  TORCH_CHECK(past_length + length <= max_positions_, "sequence of ", past_length + length,
              " positions is longer than max_position_embeddings (", max_positions_,
              "); truncate the input (e.g. max_source_length / max_target_length)");
  return weight.narrow(0, past_length + offset_, length);  // (T, D)
}

}  // namespace fitsum::model
