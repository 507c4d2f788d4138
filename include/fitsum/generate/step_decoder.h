// The decoder side of generation, shared by greedy and beam search: next-token logits for a set of rows (one row
// per sequence being generated), with or without the key/value cache, and the row bookkeeping that beam reordering
// and dropping finished sequences need. With the cache, cross-attention keys/values are computed once (on the first
// step), kept once per source and shared by its beams, and self-attention keys/values grow by one position per
// step; without it every step re-runs the decoder over all positions, as the plain reference does.
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
  // encoder_hidden (B, S, D) and attention_mask (B, S): one row per source, and to begin with one row to decode
  // per source.
  StepDecoder(model::Seq2SeqLMImpl& model, at::Tensor encoder_hidden, at::Tensor attention_mask, bool use_cache);

  // sequences (R, T) int64 on the CPU: every row's tokens so far, decoder start token first. Returns the logits of
  // the next token (R, V) as float32 on the model's device, a fresh tensor the caller may modify.
  at::Tensor next_logits(const at::Tensor& sequences);

  // Every row becomes `group` consecutive rows decoding the same source: a source's first row becomes its beams.
  // With the cache, the beams share the source's cross-attention keys/values and mask (DecoderCache::expand);
  // without it the encoder states are copied.
  void expand(std::int64_t group);

  // Keeps rows `rows` (R') in that order, on the CPU or the model's device (dropping finished rows, reordering
  // beams), and sources `sources` (B'), R' = B' * the rows per source. The cache follows, so no row is recomputed.
  // `sources` undefined: every kept row takes the place of a row decoding the same source (beams reordered within
  // their batch entry), or, with one row per source, the sources follow the rows.
  void select(const at::Tensor& rows, const at::Tensor& sources = {});

  std::int64_t rows() const { return rows_; }
  const at::Device& device() const { return device_; }

 private:
  model::Seq2SeqLMImpl& model_;
  // With the cache, one row per source; the states are released once cross-attention keys/values are computed.
  // Without it, one row per decoder row.
  at::Tensor encoder_hidden_;  // (B, S, D) or (R, S, D)
  at::Tensor attention_mask_;  // (B, S) or (R, S)
  bool use_cache_;
  model::DecoderCache cache_;
  at::Device device_;
  std::int64_t rows_;
  std::int64_t rows_per_source_ = 1;
};

}  // namespace fitsum::generate
