// Token-embedding lookups for a table that is used more than once in a step (PEGASUS ties one 96103-row table to
// the encoder input, the decoder input and the LM head). Autograd's own embedding backward materialises a dense,
// zero-filled gradient of the whole table for every lookup and then adds the copies together: for a 96103 x 512
// table that is three 197 MB buffers per micro-batch, half of an eager step's time on a CPU. Here every use adds
// into one buffer, the table's .grad, in place: lookups scatter their rows into it (index_add_), and the fused LM
// head loss (kernels/loss.h) adds its dense product into it directly.
//
// The gradient therefore reaches the table through .grad, as backward() delivers it; torch::autograd::grad() with
// the table as an input would not see it. Whenever the in-place path does not apply (the table is not a leaf that
// requires grad, or grad mode is off) the plain torch::embedding runs instead.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace fitsum::kernels {

// weight (V, D), ids (...) -> (..., D). Rows of ids equal to padding_idx get no gradient (torch's padding_idx);
// padding_idx < 0 means none.
at::Tensor embedding_lookup(const at::Tensor& weight, const at::Tensor& ids, std::int64_t padding_idx);

// True when uses of `weight` may add their gradients into weight.grad() directly (a leaf that requires grad, in
// grad mode).
bool accumulates_in_place(const at::Tensor& weight);

// weight.grad(), created zero-filled (with the weight's layout) when it does not exist yet.
at::Tensor& gradient_buffer(const at::Tensor& weight);

}  // namespace fitsum::kernels
