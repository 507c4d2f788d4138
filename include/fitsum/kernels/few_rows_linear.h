// x W^T + b for a few rows of x: the products of a decoding step (each Linear of the decoder and the LM head, for
// batch x beams rows of one position).
//
// For such inputs a BLAS call costs more than its arithmetic: OpenBLAS copies ("packs") the whole weight into its
// own layout on every call, so the LM head of a beam-8 step over 4 sources (32 x 512 times PEGASUS's 96103 x 512
// weight) reads and writes its 197 MB about three times, and smaller weights pay the copy and the threads' start
// per call. The kernel here reads each weight row once, in place, for a tile of 4 rows of x at a time, with
// AVX-512: 4 x 4 dot products accumulate in 16 registers over the inner dimension, and one shuffle tree reduces them
// to the tile's 16 outputs; the next group's weight rows are prefetched meanwhile. The weight's rows are shared
// between as many threads as the BLAS would use (each output is computed by one thread, so results do not depend
// on the thread count).
//
// Results differ from BLAS's by the order of the additions only (relative to the output's magnitude, a few 1e-7 in
// float32); they are the same on every run and every thread count.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace fitsum::kernels {

// At most this many rows (x's elements / its last dimension) take the kernel: measured on the development machine
// (2 cores, AVX-512, two threads each) against OpenBLAS for PEGASUS's shapes, the kernel is 1.6-9x faster up to
// 32 rows and from 64 rows no longer faster for every shape (docs/performance.md).
inline constexpr std::int64_t few_rows_limit = 32;

// Whether linear() below can compute linear(x, weight, bias) with the kernel: a CPU with AVX-512F; x, weight and bias
// dense float32 on the CPU, x with at most few_rows_limit rows, weight (N, K) with K a multiple of 16 and contiguous,
// bias (N) or undefined; no autograd graph to record (grad mode off, or nothing requiring a gradient) and no CPU
// autocast.
bool few_rows_kernel_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// torch::nn::functional::linear(x, weight, bias): x (..., K), weight (N, K), bias (N) or undefined -> (..., N).
// In evaluation mode (`training` false) the kernel above where few_rows_kernel_applies, else oneDNN's product where
// onednn_linear_applies, else that function (torch::nn::Linear's forward: in LibTorch's C++ frontend a product and an
// in-place bias addition, not at::linear). In training onednn_linear.h's dense_linear, whether or not a graph is
// recorded: a checkpointed segment's forward runs without one, and its recomputation in backward must compute the
// same values.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool training);

// torch::matmul(a, b) for a (..., M, K) and b (..., K, N), attention's products over many query rows: in evaluation
// mode onednn_linear.h's onednn_matmul where it applies (on as many threads as linear() uses), else torch::matmul;
// in training dense_matmul.
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b, bool training);

// The two products of attention for a few query rows, batched over the leading dimensions (batch and heads): at a
// decoding step, one query row per sequence and head in self-attention, a source's beams (its group) in
// cross-attention. LibTorch 1.x's bmm makes one BLAS call per batch entry (per row and head in self-attention:
// 3072 calls per step for 4 sources x 8 beams x 8 heads x 6 layers), each costing more than its arithmetic.
// scores: the kernel above per entry, key rows for weight rows; context: 4 rows of probabilities at a time against
// each value row, in registers, summed in the key positions' order. Entries are shared between threads as
// linear()'s weight rows are: results do not depend on the thread count.

// Whether the two functions below apply: a CPU with AVX-512F; query (..., M, K), key (..., S, K) and value
// (..., S, D) dense float32 on the CPU with the same leading dimensions (at least one, none broadcast), M at most
// few_rows_limit, K and D multiples of 16; no autograd graph to record and no CPU autocast.
bool few_rows_attention_applies(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value);

// query key^T: (..., M, K) x (..., S, K) -> (..., M, S), for inputs few_rows_attention_applies to (else throws).
at::Tensor few_rows_scores(const at::Tensor& query, const at::Tensor& key);

// probs value: (..., M, S) x (..., S, D) -> (..., M, D), for probabilities of a query few_rows_attention_applies to
// (else throws).
at::Tensor few_rows_context(const at::Tensor& probs, const at::Tensor& value);

}  // namespace fitsum::kernels
