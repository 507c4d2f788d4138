// x W^T + b for many rows of x outside training, through oneDNN's sgemm (the library Debian's LibTorch 1.13 itself
// links, libdnnl.so.2): the encoder's products and the cross-attention keys and values of evaluation and generation.
//
// LibTorch 1.13's products go to OpenBLAS, which Debian builds for a list of processors chosen at run time: on one
// it does not know (a newer one than its release, or where OPENBLAS_CORETYPE names an older core) it runs kernels
// for an older instruction set, e.g. Haswell's AVX2 on a processor with AVX-512. oneDNN generates its kernels for the
// instruction set the processor reports. On the development machine (2 cores of an AMD EPYC with AVX-512, OpenBLAS
// on its Haswell kernels) the encoder's shapes run at 395-440 GFLOP/s against OpenBLAS's ~240 (docs/performance.md).
//
// Used only where no autograd graph is recorded and the module is in evaluation mode (as few_rows_linear.h's kernel):
// training keeps LibTorch's products, so that a checkpointed segment's recomputation computes what its forward did.
// Results differ from OpenBLAS's by the order of the additions only (relative to the output's magnitude, a few 1e-7
// in float32). Built against another LibTorch (2.x: the wheels link their own oneDNN and OpenMP runtime), or without
// the library (CMake's FITSUM_WITH_ONEDNN), onednn_linear_applies is false and the products stay LibTorch's.
#pragma once

#include <ATen/core/Tensor.h>

namespace fitsum::model {

// What every evaluation product kernel of fitsum's takes (this one and few_rows_linear.h's): x (..., K), weight
// (N, K) contiguous and bias (N) contiguous or undefined, dense float32 on the CPU; no autograd graph to record (grad
// mode off, or nothing requiring a gradient) and no CPU autocast.
bool graph_free_float_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Whether onednn_linear can compute linear(x, weight, bias): the library built in, a processor whose instruction set
// its kernels use beyond OpenBLAS's (AVX-512), and inputs graph_free_float_linear takes.
bool onednn_linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// x (..., K) W^T + bias -> (..., N), with `threads` OpenMP threads, for inputs onednn_linear_applies to (else throws).
at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int threads);

// Whether onednn_matmul can compute at::matmul(a, b) for a (..., M, K) and b (..., K, N) with the same leading
// dimensions (at least one, none broadcast), dense float32 on the CPU; no autograd graph to record and no CPU
// autocast.
bool onednn_matmul_applies(const at::Tensor& a, const at::Tensor& b);

// at::matmul(a, b) for inputs onednn_matmul_applies to (else throws): one sgemm per matrix of the leading
// dimensions, the matrices shared between up to `threads` OpenMP threads (each product on one thread, so results do
// not depend on the thread count).
at::Tensor onednn_matmul(const at::Tensor& a, const at::Tensor& b, int threads);

}  // namespace fitsum::model
