// PEGASUS-X's attention from the scores' operands to the context, softmax(q k^T + mask), dropout, times the values,
// as one autograd node on the CPU.
//
// Composed of autograd's nodes, backward keeps three tensors of the probabilities' size: the softmax's output (its
// own backward reads it), the dropout's byte mask, and the dropped probabilities (the product with the values reads
// them). The probabilities are the layer's largest tensors: at 4096 source tokens pegasus-x-base's local ones are 12
// heads x 4096 rows x 640 keys, 120 MiB a layer (135 MiB in a staggered layer, whose blocks span 4608 positions).
// The node keeps only the byte mask and its operands, which the score and value products keep anyway, and
// recomputes in backward, with the forward's kernels and operands, the probabilities (the score products, the mask's
// sum, the softmax) and from them the dropped probabilities, bit for bit. Its backward runs the products of the
// composition (onednn_linear.h's onednn_matmul on the same operands and strides, as DenseMatmulFunction's backward)
// and the softmax's backward kernel (written over the probabilities' gradient), so outputs and gradients equal the
// composition's bit for bit (tests/model/pegasus_x_fast_paths_test.cpp). The recomputation costs the two score
// products and one softmax per layer, a few percent of the layer's arithmetic.
//
// Forward and backward run head by head (and batch row by batch row): the heads are independent, so one head's
// probabilities and their gradient are all that exist at a time, a 1/H of the composition's. At 16384 source tokens
// pegasus-x-large's staggered layer has 16 heads x 16896 rows x 640 keys, 660 MiB of probabilities, of which the
// composition's backward holds about three copies and the node two of one head's (83 MiB). The byte mask is drawn
// whole first (kernels::draw_byte_mask: the same bytes as the composition's dropout) and applied head by head.
// Without gradients (a checkpointed layer's first pass) the same head-by-head forward runs without the node.
//
// It applies in training with the byte-mask dropout, 0 < p < 1, float32 on the CPU with oneDNN and no autocast;
// elsewhere the functions below are the composition itself (kernels::matmul's products, torch::softmax, dropout).
#pragma once

#include <ATen/core/Tensor.h>

namespace fitsum::kernels {

// softmax(q @ k_t + mask) with dropout p, @ v: q (..., T, hd), k_t (..., hd, S), mask additive and broadcastable to
// (..., T, S), v (..., S, hd) -> (..., T, hd). `byte_mask` as kernels::dropout's (KernelChoices::byte_mask_dropout):
// off, torch::dropout and no node. `recompute` chooses the node where it applies
// (KernelChoices::recomputed_attention_dropout); off, the composition.
at::Tensor attention_context(const at::Tensor& q, const at::Tensor& k_t, const at::Tensor& mask, const at::Tensor& v,
                             double p, bool training, bool byte_mask, bool recompute);

// PEGASUS-X's local attention: each of the N blocks of K positions attends to the G global tokens and to its own
// block, one softmax over both. With local_q (B, H, N K, hd), global_k_t (B, H, hd, G), block_q (B, H, N, K, hd),
// block_k_t (B, H, N, hd, K) and block_mask broadcastable to (B, H, N, K, G + K):
//   probs = softmax(cat(local_q @ global_k_t viewed (B, H, N, K, G), block_q @ block_k_t) + block_mask),
//   d = dropout(probs, p),
//   d[..., :G] viewed (B, H, N K, G) @ global_v (B, H, G, hd) + (d[..., G:] @ block_v (B, H, N, K, hd)) viewed
//   (B, H, N K, hd) -> (B, H, N K, hd).
at::Tensor global_local_context(const at::Tensor& local_q, const at::Tensor& global_k_t, const at::Tensor& block_q,
                                const at::Tensor& block_k_t, const at::Tensor& block_mask, const at::Tensor& global_v,
                                const at::Tensor& block_v, double p, bool training, bool byte_mask, bool recompute);

}  // namespace fitsum::kernels
