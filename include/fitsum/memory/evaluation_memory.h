// The memory of evaluation: what `per_device_eval_batch_size` and beam search add on top of what training keeps
// resident (weights, gradients, optimizer state), so that the planner bounds evaluation under the same budget.
//
// Evaluation runs without autograd, so nothing is stored for a backward pass: a stack holds one layer's
// activations at a time, and the memory that grows with depth and length is generation's key/value cache. The
// model is counted, tensor by tensor, from the implementation (model/seq2seq.cpp, generate/step_decoder.cpp,
// generate/beam_search.cpp) rather than probed: its terms are few, exact and known in advance, so a plan costs no
// time for it. tests/model/evaluation_memory_test.cpp checks each phase against the tracking allocator's peaks.
//
// The phases, each a peak above the resident memory (B eval batch, K beams, R = B K rows, S source, T labels,
// G = max_length - 1 generated positions, L decoder layers, D d_model, F ffn, H heads, V vocabulary):
//   encoder       one layer at a time over (B, S): attention keeps the layer input and its norm (float32), three
//                 query-length and two key-length products, and on the math path (1.13) the scores (B H S^2: the
//                 sum with the mask and its softmax); the fused kernels of 2.x keep no scores. The feed-forward
//                 block keeps the input, the residual sum and its norm beside its products (B S F each). T5 adds
//                 its stack's position-bias mask (B H S^2, float32).
//   loss          the encoder; then the decoder over (B, T) with cross-attention to S beside the encoder output;
//                 then the fused head's chunk of float32 logits (B T x min(V, 32 MiB / (4 B T)) columns).
//   generation    the encoder; then cross-attention keys/values of every decoder layer for all rows (2 L R S D),
//                 the self-attention cache at its longest (2 L R G D) plus one layer's copy while it grows, and the
//                 larger of that copy and the next-token logits with their log-softmax (2 R V, fp32). Without the
//                 cache, each step reruns the decoder over every position: the loss phase's decoder terms at R
//                 rows and G positions.
// Under bf16 autocast the products are bfloat16 and the rest float32, with the transients autocast adds (a
// linear's float32 bias sum, the math path's float32 scores, the fused kernels' bfloat16 copies); the source file
// says which tensor each term is.
#pragma once

#include <cstdint>
#include <string>

#include "fitsum/model/config.h"

namespace fitsum::memory {

struct EvaluationLoad {
  std::int64_t batch = 8;            // per_device_eval_batch_size
  std::int64_t source_length = 512;  // the longest source after truncation
  std::int64_t target_length = 128;  // the longest labels (the loss phase)
  bool compute_loss = true;          // the eval loss pass (labels present)
  bool generate = true;              // predict_with_generate
  std::int64_t num_beams = 1;
  std::int64_t max_length = 128;  // generation's effective max_length: decoder positions, the start token included
  bool use_cache = true;
  bool bf16 = false;  // autocast to bfloat16 (fp32 weights)
  // Intra-op threads evaluation runs on (LibTorch 2.x's fused attention keeps blocks per thread); 0: the current
  // pool's.
  std::int64_t threads = 0;
};

struct EvaluationMemory {
  std::uint64_t encoder = 0;     // peak of the encoder pass
  std::uint64_t loss = 0;        // peak of the loss pass (0 without it)
  std::uint64_t generation = 0;  // peak of generation (0 without it)
  std::uint64_t cache = 0;       // of which the key/value cache at its longest
  // The largest phase: what evaluation adds to the resident memory at its peak.
  std::uint64_t peak() const;
};

// Throws std::invalid_argument for a non-positive batch, length or beam count.
EvaluationMemory predict_evaluation(const model::ModelConfig& config, const EvaluationLoad& load);

// The largest batch <= load.batch whose evaluation fits in `available` bytes; 0 when not even one example does.
std::int64_t largest_evaluation_batch(const model::ModelConfig& config, const EvaluationLoad& load,
                                      std::uint64_t available);

}  // namespace fitsum::memory
