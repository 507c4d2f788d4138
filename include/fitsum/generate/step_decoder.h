// The decoder side of generation, shared by greedy and beam search: next-token logits for a set of rows (one row
// per sequence being generated), with or without the key/value cache, and the row bookkeeping that beam reordering
// and dropping finished sequences need. With the cache, cross-attention keys/values are computed once (on the first
// step) and self-attention keys/values grow by one position per step; without it every step re-runs the decoder
// over all positions, as the plain reference does.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "fitsum/model/seq2seq.h"

namespace fitsum::generate {

// Inference mode for the duration of a search: no autograd graph, dropout off. The module's training flag is put
// back afterwards, so generating from a model in the middle of training leaves it training.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(torch::nn::Module& module);
  ~EvalModeGuard();
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  torch::NoGradGuard no_grad_;
  torch::nn::Module& module_;
  bool was_training_;
};

class StepDecoder {
 public:
  // encoder_hidden (R, S, D) and attention_mask (R, S): one row per sequence to decode.
  StepDecoder(model::Seq2SeqLMImpl& model, at::Tensor encoder_hidden, at::Tensor attention_mask, bool use_cache);

  // sequences (R, T) int64 on the CPU: every row's tokens so far, decoder start token first. Returns the logits of
  // the next token (R, V) as float32 on the model's device, a fresh tensor the caller may modify.
  at::Tensor next_logits(const at::Tensor& sequences);

  // Keeps rows `index` (R') in that order, on the CPU or the model's device: copying one row per source into its
  // beams, dropping finished rows, reordering beams. The cache follows, so no row is recomputed.
  // `same_sources`: every kept row takes the place of a row decoding the same source (beams reordered within their
  // batch entry). Cross-attention keys/values and the source mask are then identical for old and new rows and are
  // left alone, as HF's _reorder_cache leaves them.
  void select(const at::Tensor& index, bool same_sources = false);

  std::int64_t rows() const { return rows_; }
  const at::Device& device() const { return device_; }

 private:
  model::Seq2SeqLMImpl& model_;
  at::Tensor encoder_hidden_;  // (R, S, D); with the cache, released once cross-attention keys/values are computed
  at::Tensor attention_mask_;  // (R, S)
  bool use_cache_;
  model::DecoderCache cache_;
  at::Device device_;
  std::int64_t rows_;
};

}  // namespace fitsum::generate
