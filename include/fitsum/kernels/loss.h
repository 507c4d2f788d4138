// The token losses of sequence-to-sequence training. Two ways to the same numbers:
//   label_loss_sum       from full logits (B, T, V), as HF computes it (kept for evaluation and tests);
//   linear_cross_entropy from the decoder states, fusing the LM head into the loss: logits exist only for the
//                        label tokens, at most once, and become their own gradient in place (or, past a size
//                        limit, are walked in vocabulary chunks and recomputed in backward); the head weight's
//                        gradient is added into its .grad in place (kernels/tied_embedding.h).
// Label smoothing is HF's LabelSmoother: each token costs (1 - eps) * nll + eps * mean over the vocabulary of
// -log p. Positions labelled -100 cost nothing and get no gradient.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace fitsum::kernels {

// The summed loss of the label tokens (those not -100) and their count; dividing the sum by the tokens of a whole
// accumulated batch gives the exact loss of that batch.
struct TokenLoss {
  at::Tensor sum;  // () float32
  std::int64_t tokens = 0;
};

// Mean cross-entropy of logits (B, T, V) against labels (B, T), ignoring -100.
at::Tensor label_cross_entropy(const at::Tensor& logits, const at::Tensor& labels);

// Summed (optionally smoothed) cross-entropy of logits (B, T, V) against labels (B, T).
TokenLoss label_loss_sum(const at::Tensor& logits, const at::Tensor& labels, double label_smoothing = 0.0);

// What the host already knows of a micro-batch's labels (train/device_batch.h finds it in the collated CPU tensors
// before they are copied to the device), so that the loss reads nothing back from the device: on CUDA, finding the
// label rows (nonzero), checking the ids' range and testing the bias each wait for the device.
struct KnownLabels {
  at::Tensor rows;           // (M) int64 on the labels' device: positions in labels.reshape(-1) that are not -100
  bool ids_checked = false;  // every input and label id was checked to lie in [0, vocabulary) on the host
  bool bias_nonzero = true;  // whether the head's bias has an entry that is not 0 (read once per run)
};

// Whether `bias` (the head's, a buffer) has an entry that is not 0: a bias of zeros is skipped.
bool bias_has_nonzero(const at::Tensor& bias);

struct LinearCrossEntropyOptions {
  double label_smoothing = 0.0;
  // When a gradient is wanted and the float32 logits of all label tokens (M x V) take at most this many bytes,
  // they are computed once and turned into their gradient during the forward (no recomputation); beyond it the
  // vocabulary is walked in chunks, forward and again in backward.
  std::int64_t keep_logits_bytes = std::int64_t{128} << 20;
  // Bytes of one chunk of logits (label tokens x vocabulary columns); the chunk is at least 256 columns wide.
  std::int64_t chunk_bytes = std::int64_t{32} << 20;
  const KnownLabels* known = nullptr;  // given: nothing is read back from the device
};

// label_loss_sum(hidden x weight^T + bias, labels) without materialising the logits.
// hidden (B, T, D), weight (V, D), bias (1, V) or undefined (a buffer: it gets no gradient), labels (B, T).
// Computed in float32 whatever autocast says.
TokenLoss linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& bias,
                               const at::Tensor& labels, const LinearCrossEntropyOptions& options = {});

}  // namespace fitsum::kernels
