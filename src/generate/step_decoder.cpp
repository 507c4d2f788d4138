// Implements include/fitsum/generate/step_decoder.h.
#include "fitsum/generate/step_decoder.h"

#include <torch/torch.h>

#include "fitsum/model/decoder_cache.h"

namespace fitsum::generate {

EvalModeGuard::EvalModeGuard(torch::nn::Module& module) : module_(module), was_training_(module.is_training()) {
  module_.eval();
}

EvalModeGuard::~EvalModeGuard() {
  if (was_training_) {
    module_.train(true);
  }
}

StepDecoder::StepDecoder(model::Seq2SeqLMImpl& model, at::Tensor encoder_hidden, at::Tensor attention_mask,
                         bool use_cache)
    : model_(model),
      encoder_hidden_(std::move(encoder_hidden)),
      attention_mask_(std::move(attention_mask)),
      use_cache_(use_cache),
      cache_(model.new_cache()),
      device_(encoder_hidden_.device()),
      rows_(encoder_hidden_.size(0)) {
  TORCH_CHECK(attention_mask_.size(0) == rows_, "StepDecoder: ", attention_mask_.size(0), " mask rows for ", rows_,
              " encoder rows");
}

at::Tensor StepDecoder::next_logits(const at::Tensor& sequences) {
  TORCH_CHECK(sequences.size(0) == rows_, "StepDecoder: ", sequences.size(0), " sequences for ", rows_, " rows");
  const auto length = sequences.size(1);
  torch::Tensor hidden;  // (R, 1, D): the decoder state of the last position
  if (use_cache_) {
    // Only the newest token is new to the decoder; everything before it is in the cache.
    TORCH_CHECK(cache_.length == length - 1, "StepDecoder: the cache holds ", cache_.length,
                " positions but the sequences have ", length, " tokens; feed one new token per step");
    auto last = sequences.narrow(1, length - 1, 1).to(device_);  // (R, 1)
    hidden = model_.decode(last, encoder_hidden_, attention_mask_, &cache_);
    // Cross-attention now reads its keys/values from the cache (the decoder ignores the encoder states once the
    // cache holds them), so the states need not be kept, nor reordered with the beams. An empty tensor (not a
    // zero-row slice, which would keep the whole storage alive) keeps the dtype that decode() reads.
    if (encoder_hidden_.size(0) > 0) {
      encoder_hidden_ = at::empty({0, encoder_hidden_.size(1), encoder_hidden_.size(2)}, encoder_hidden_.options());
    }
  } else {
    auto all = model_.decode(sequences.to(device_), encoder_hidden_, attention_mask_);  // (R, T, D)
    hidden = all.narrow(1, length - 1, 1);
  }
  // The LM head on the last position only; float32 so that log-softmax and beam scores accumulate as in HF.
  return model_.lm_logits(hidden).select(1, 0).to(torch::kFloat32).contiguous();  // (R, V)
}

void StepDecoder::expand(std::int64_t group) {
  rows_ *= group;
  rows_per_source_ *= group;
  if (use_cache_) {
    cache_.expand(group);
    return;
  }
  attention_mask_ = attention_mask_.repeat_interleave(group, 0);
  encoder_hidden_ = encoder_hidden_.repeat_interleave(group, 0);
}

void StepDecoder::select(const at::Tensor& rows, const at::Tensor& sources) {
  auto on_device = rows.to(device_);
  const auto source_index =
      model::kept_sources(on_device, sources.defined() ? sources.to(device_) : sources, rows_per_source_);
  rows_ = on_device.size(0);
  if (!use_cache_) {
    // One row of states and mask per decoder row.
    if (source_index.defined()) {
      attention_mask_ = attention_mask_.index_select(0, on_device);
      encoder_hidden_ = encoder_hidden_.index_select(0, on_device);
    }
    return;
  }
  if (source_index.defined()) {
    attention_mask_ = attention_mask_.index_select(0, source_index);
    if (encoder_hidden_.size(0) > 0) encoder_hidden_ = encoder_hidden_.index_select(0, source_index);
  }
  cache_.select(on_device, source_index);
}

}  // namespace fitsum::generate
