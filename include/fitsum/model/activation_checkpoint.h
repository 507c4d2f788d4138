// Activation checkpointing for LibTorch, which has no C++ checkpoint utility: run a block without keeping its
// intermediate activations, and recompute them during backward. The random-number state of the inputs' device is
// saved before the forward and restored for the recompute, so dropout draws the very same masks and the gradients
// equal those of the plain run; the generator is put back afterwards, so the random stream of the rest of the
// step is unchanged too. (The reentrant variant of torch.utils.checkpoint.)
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

namespace fitsum::model {

using TensorList = std::vector<at::Tensor>;
using CheckpointedBlock = std::function<TensorList(const TensorList&)>;

// Runs block(inputs) keeping only `inputs`; gradients flow to the inputs that require them and to the parameters
// the block uses. Outside grad mode it simply runs the block.
TensorList checkpoint(const CheckpointedBlock& block, const TensorList& inputs);

}  // namespace fitsum::model
