// The model's matrix products through oneDNN's sgemm (the library Debian's LibTorch 1.13 itself links,
// libdnnl.so.2): in training every product of a step (the Linear layers, attention's, the LM head's in the loss, each
// forward and backward), in evaluation those over many rows (the encoder's; a decoding step's few rows take
// few_rows_linear.h's kernel).
//
// LibTorch 1.13's products go to OpenBLAS, which Debian builds for a list of processors chosen at run time: on one
// it does not know (a newer one than its release, or where OPENBLAS_CORETYPE names an older core) it runs kernels
// for an older instruction set, e.g. Haswell's AVX2 on a processor with AVX-512. oneDNN generates its kernels for the
// instruction set the processor reports. On the development machine (2 cores of an AMD EPYC with AVX-512, OpenBLAS
// on its Haswell kernels) PEGASUS-small's shapes run at 395-440 GFLOP/s against OpenBLAS's ~240 (docs/performance.md).
//
// All or nothing: oneDNN's OpenMP team and OpenBLAS's threads both spin between products on the cores the other
// needs, so a step that mixed them was slower than either alone. Hence the training products are fitsum's own
// autograd nodes (dense_linear, dense_matmul) and fitsum's fused nodes call dense_mm / dense_addmm_, and the choice
// depends only on the build and the processor (not on whether a graph is recorded: a checkpointed segment's
// recomputation computes what its forward did). Results differ from OpenBLAS's by the order of the additions only
// (relative to the output's magnitude, a few 1e-7 in float32); they are the same on every run, but for inner
// dimensions above ~1000 oneDNN blocks a sum differently on one thread than on several. Built against another
// LibTorch (2.x: the wheels link their own oneDNN and OpenMP runtime), with clang, or without the library (CMake's
// FITSUM_WITH_ONEDNN), or on a processor without AVX-512 (or with ONEDNN_MAX_CPU_ISA below it), or with FITSUM_ONEDNN=0
// in the environment, every function here is LibTorch's product.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace fitsum::kernels {

// Whether the build has oneDNN and the processor AVX-512 (oneDNN's reading, ONEDNN_MAX_CPU_ISA applied), and the
// environment does not say FITSUM_ONEDNN=0.
bool onednn_available();

// Threads for a product of `fmas` multiply-adds: as many as the BLAS would use (or LibTorch's intra-op pool, if
// wider), at least ~half a million multiply-adds each.
int product_threads(std::int64_t fmas);

// c = a b + beta c with oneDNN's sgemm for 2-D float32 CPU matrices, a and b row-major or transposed row-major, c
// row-major; false (nothing computed) where oneDNN is not available or a layout does not fit.
bool onednn_gemm(const at::Tensor& c, const at::Tensor& a, const at::Tensor& b, float beta);

// at::mm(a, b), c.addmm_(a, b) and at::addmm(bias, a, b), through onednn_gemm where it applies: the products of
// fitsum's own autograd functions (kernels/loss.h, kernels/feed_forward.h, dense_linear below), so that a training step
// runs all its products on one library's threads.
at::Tensor dense_mm(const at::Tensor& a, const at::Tensor& b);
void dense_addmm_(const at::Tensor& c, const at::Tensor& a, const at::Tensor& b);
at::Tensor dense_addmm(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b);

// torch::nn::functional::linear(x, weight, bias) and torch::matmul(a, b) recording their own autograd nodes whose
// forward and backward products are dense_mm's, where oneDNN is available and the inputs are float32 CPU tensors
// (weight and bias contiguous) outside autocast; else LibTorch's functions.
at::Tensor dense_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// linear(x, weight, bias) for a float32 x and a frozen (requires_grad false) bfloat16 weight, the LoRA base held in
// bfloat16 (model/lora.h): the product runs in float32 on a float32 copy of the weight made as it runs, and the
// autograd node keeps the bfloat16 weight for backward (x's gradient), never the copy. Under CPU autocast,
// LibTorch's linear (which casts to bfloat16 anyway).
at::Tensor frozen_bfloat16_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool training);
at::Tensor dense_matmul(const at::Tensor& a, const at::Tensor& b);

// What every evaluation product kernel of fitsum's takes (this one and few_rows_linear.h's): x (..., K), weight
// (N, K) contiguous and bias (N) contiguous or undefined, dense float32 on the CPU; no autograd graph to record (grad
// mode off, or nothing requiring a gradient) and no CPU autocast.
bool graph_free_float_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Whether onednn_linear can compute linear(x, weight, bias): the library built in, a processor whose instruction set
// its kernels use beyond OpenBLAS's (AVX-512), and inputs graph_free_float_linear takes.
bool onednn_linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// x (..., K) W^T + bias -> (..., N) on product_threads' OpenMP threads, for inputs onednn_linear_applies to (else
// throws).
at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Whether onednn_matmul can compute at::matmul(a, b) for a (..., M, K) and b (..., K, N) with the same leading
// dimensions (at least one, none broadcast), dense float32 on the CPU; no autograd graph to record and no CPU
// autocast.
bool onednn_matmul_applies(const at::Tensor& a, const at::Tensor& b);

// at::matmul(a, b) for inputs onednn_matmul_applies to (else throws): one sgemm per matrix of the leading
// dimensions, the matrices shared between up to product_threads' OpenMP threads (each product on one thread, so
// results do not depend on the thread count).
at::Tensor onednn_matmul(const at::Tensor& a, const at::Tensor& b);

}  // namespace fitsum::kernels
