// The second half of PEGASUS's and BART's feed-forward block, fc2(dropout(activation(u))) with u = fc1(x).
//
// Composed of LibTorch's operations, autograd keeps three tensors of B x T x ffn until backward: the activation's
// input u, the dropout's mask and fc2's input. On the CPU in float32 with fitsum's byte-mask dropout this is one
// autograd node that keeps u and the byte mask only, and recomputes fc2's input in backward from them (one
// activation and one masking pass over B x T x ffn): a float B x T x ffn tensor less per layer until backward reaches
// it (4 MiB per encoder layer of the `small` benchmark, ~30 MiB of its tensor peak). Forward and backward run the
// same LibTorch and fitsum kernels in the same order as the composition (fc2 as torch::nn::Linear computes it), so
// outputs and gradients are the same bit for bit (tests/model/fast_paths_test.cpp). Elsewhere (bfloat16, autocast,
// CUDA, torch's dropout) it is the composition itself.
//
// Each pass holds one tensor of u's size beside u at a time: the forward writes the dropout over the activation's
// output; the backward writes the byte mask over the recomputed activation, frees it once fc2's weight gradient is
// taken, and writes the mask and the activation's backward over u's gradient (the elementwise kernels' own _out
// forms, the same bits). Without gradients (a checkpointed layer's first pass) the composition frees u once
// activated and writes the dropout over the activation (kernels::dropout_over). At 16384 source tokens a
// pegasus-x-large layer's u is 256 MiB: its backward held four more such tensors, its forward two.
#pragma once

#include <ATen/core/Tensor.h>

#include "fitsum/kernels/activation.h"

namespace fitsum::kernels {

// HF's ACT2FN for the activations fitsum's configs name.
at::Tensor activate(const at::Tensor& x, Activation activation);

// fc2(dropout(activation(u))) with fc2's `weight` (D x ffn) and `bias` (D, or undefined); dropout with probability
// `p` when training, the byte-mask kernel when `byte_mask` (kernels/dropout.h), else torch::dropout. `recompute`
// chooses the single node described above where it applies (KernelChoices::recomputed_feed_forward). `u` is taken
// by value: a caller that moves it in (or passes fc1's output directly) lets the composition free it before fc2
// runs (memory/evaluation_memory.h counts fc1's output beside its activation, not beside fc2's product).
at::Tensor activation_dropout_linear(at::Tensor u, Activation activation, double p, bool training, bool byte_mask,
                                     const at::Tensor& weight, const at::Tensor& bias, bool recompute);

}  // namespace fitsum::kernels
