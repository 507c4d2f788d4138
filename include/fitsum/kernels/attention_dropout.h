// Attention's dropout and its product with the values, dropout(probs) @ v, as one autograd node on the CPU.
//
// Composed of fitsum's dropout and product nodes, autograd keeps three tensors of the probabilities' size until
// backward: the softmax's output (softmax's own backward reads it), the byte mask, and the dropped probabilities
// (the product's backward reads them for the values' gradient). The node keeps the probabilities it is given (the
// softmax's output: the tensor softmax keeps anyway) and the byte mask, and recomputes the dropped probabilities in
// backward with apply_byte_mask, which gives the forward's values again bit for bit. At 4096 source tokens PEGASUS-X
// base's local probabilities are 12 heads x 4096 rows x 640 keys, 120 MiB a layer kept less. The node runs the
// products of the composition (onednn_linear.h's onednn_matmul, the same operands and strides) in the same order, so
// outputs and gradients equal the composition's bit for bit (tests/model/pegasus_x_fast_paths_test.cpp). It applies
// in training with the byte-mask dropout, 0 < p < 1, float32 on the CPU with oneDNN and no autocast; elsewhere the
// functions below are the composition itself.
#pragma once

#include <ATen/core/Tensor.h>

namespace fitsum::kernels {

// dropout(probs, p) @ v for probs (..., T, S) and v (..., S, hd) with the same leading dimensions -> (..., T, hd).
// `byte_mask` as kernels::dropout's (KernelChoices::byte_mask_dropout): off, torch::dropout and no node. `recompute`
// chooses the node where it applies (KernelChoices::recomputed_attention_dropout); off, the composition.
at::Tensor dropout_matmul(const at::Tensor& probs, const at::Tensor& v, double p, bool training, bool byte_mask,
                          bool recompute);

// PEGASUS-X's local attention context: one softmax over each position's global tokens and its block, probs
// (B, H, N, K, G + K) for N blocks of K positions and G global tokens; d = dropout(probs, p), then
//   d[..., :G] (viewed as (B, H, N K, G)) @ global_v (B, H, G, hd)  +  (d[..., G:] @ block_v (B, H, N, K, hd))
// viewed as (B, H, N K, hd) -> (B, H, N K, hd).
at::Tensor global_local_context(const at::Tensor& probs, const at::Tensor& global_v, const at::Tensor& block_v,
                                double p, bool training, bool byte_mask, bool recompute);

}  // namespace fitsum::kernels
