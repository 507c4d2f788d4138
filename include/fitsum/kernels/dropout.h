// Inverted dropout with torch.nn.functional.dropout's semantics (each element zeroed with probability p, the rest
// scaled by 1 / (1 - p)), and a CPU kernel built for training memory and speed: the mask kept for backward is one
// byte per element instead of a float, and the random bits come from a counter-based generator (a 32-bit hash of
// the element's index, keyed by one draw from LibTorch's default generator) in vectorised loops. The masks differ from
// torch::dropout's, but a seed (torch::manual_seed) reproduces them, and so does activation checkpointing's
// replay of the generator state. Other devices and dtypes run torch::dropout.
#pragma once

#include <ATen/core/Tensor.h>

namespace fitsum::kernels {

// The byte-mask kernel itself, for the autograd nodes that fuse dropout with their neighbours (kernels/feed_forward.h):
// `input` on the CPU, float32 or bfloat16, 0 < p < 1; one draw of LibTorch's generator, as dropout() makes.
struct ByteMaskDropout {
  at::Tensor output;  // contiguous
  at::Tensor mask;    // uint8, 1 where kept
  float scale = 1.0f;
};
ByteMaskDropout byte_mask_dropout(const at::Tensor& input, double p);
// The mask byte_mask_dropout would draw for an input of `sizes` (one draw of LibTorch's generator), without the
// input: apply_byte_mask(x, mask, scale) is then byte_mask_dropout(x, p)'s output bit for bit, also applied block by
// block (element i's byte depends on i alone), as the attention's node does, head by head.
struct ByteMask {
  at::Tensor mask;  // uint8, 1 where kept
  float scale = 1.0f;
};
ByteMask draw_byte_mask(at::IntArrayRef sizes, double p);
// x * mask * scale, element by element in float: the backward of byte_mask_dropout for a gradient, and, for the
// input the mask was drawn for, its output again bit for bit.
at::Tensor apply_byte_mask(const at::Tensor& x, const at::Tensor& mask, float scale);
// The same, written over `x` (contiguous, float32 or bfloat16): one tensor of x's size less, the same bits.
at::Tensor& apply_byte_mask_(at::Tensor& x, const at::Tensor& mask, float scale);

// The model's dropout (below), written over `x` where autograd records nothing (gradient mode off, or x needs no
// gradient) and the byte-mask kernel applies: the same draw and bits, one tensor of x's size less. Elsewhere
// dropout(x, p, training, byte_mask). The caller keeps no other reference to x's values.
at::Tensor dropout_over(at::Tensor x, double p, bool training, bool byte_mask);

// Returns `input` itself when not training or p == 0.
at::Tensor dropout(const at::Tensor& input, double p, bool training);
// The model's dropout: this one, or torch::dropout when `byte_mask` is off (KernelChoices::byte_mask_dropout).
at::Tensor dropout(const at::Tensor& input, double p, bool training, bool byte_mask);

}  // namespace fitsum::kernels
