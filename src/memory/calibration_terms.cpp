// Implements the parts of include/fitsum/memory/calibration.h that need no probe: the layer model's transient, the
// loss head's modes, the FLOPs of a micro-step and the counts with frozen embeddings (the probe is calibration.cpp).
#include <algorithm>
#include <cmath>

#include "fitsum/kernels/loss.h"
#include "fitsum/memory/calibration.h"

namespace fitsum::memory {

std::int64_t encoder_layer_unit(const model::ModelConfig& config, bool lora) {
  const bool staggered = config.encoder_attention == model::EncoderAttention::global_local &&
                         config.stagger_local_blocks && config.encoder_layers >= 2 && config.encoder_layers % 2 == 0;
  return staggered && !lora ? 2 : 1;
}

BatchShape fitted_shape(const model::ModelConfig& config, const BatchShape& shape) {
  if (config.encoder_attention != model::EncoderAttention::global_local || config.block_size < 1) return shape;
  const auto k = config.block_size;
  const auto padded = (shape.source + k - 1) / k * k;
  return {shape.batch, padded + (config.stagger_local_blocks ? k / 2 : 0), shape.target};
}

double LayerMemory::transient(const BatchShape& shape, std::int64_t encoder_layers, std::int64_t decoder_layers,
                              std::int64_t checkpointed_encoder_layers, std::int64_t checkpointed_decoder_layers,
                              double decoder_adjust, double encoder_backward_adjust) const {
  const auto e = static_cast<double>(encoder_layers), d = static_cast<double>(decoder_layers);
  const auto ce = static_cast<double>(std::clamp<std::int64_t>(checkpointed_encoder_layers, 0, encoder_layers));
  const auto cd = static_cast<double>(std::clamp<std::int64_t>(checkpointed_decoder_layers, 0, decoder_layers));
  const double encoder_activations = (e - ce) * encoder_plain(shape) + ce * encoder_checkpointed(shape);
  // The rests measured with plain bottom layers hold the bottom layers as plain ones, those measured with every layer
  // checkpointed hold them checkpointed: where the bottom layer is the other kind, the difference (zero but with a
  // frozen base, see LayerMemory) is added.
  const double bottom_encoder = encoder_bottom_checkpointed(shape), bottom_decoder = decoder_bottom_checkpointed(shape);
  const double with_plain_rests = encoder_activations + (ce > 0 ? bottom_encoder : 0.0);
  const double with_checkpointed_rests = encoder_activations - (ce > 0 ? 0.0 : bottom_encoder);
  const double decoder_bottom = cd > 0 ? bottom_decoder : 0.0;
  double decoder_phase = 0.0, encoder_phase = 0.0;
  if (cd < d) {
    decoder_phase = decoder_rest(shape) + with_plain_rests + decoder_bottom + cd * decoder_checkpointed(shape) +
                    (d - cd) * decoder_plain(shape);
  }
  if (cd > 0) {
    const double mixed = cd < d ? std::max(0.0, decoder_mixed(shape)) : 0.0;
    decoder_phase = std::max(
        decoder_phase, decoder_recompute(shape) + with_checkpointed_rests + cd * decoder_checkpointed(shape) + mixed);
  }
  if (ce < e) encoder_phase = encoder_rest(shape) + with_plain_rests;
  if (ce > 0) {
    const double mixed = ce < e ? std::max(0.0, encoder_mixed(shape)) : 0.0;
    encoder_phase = std::max(encoder_phase, encoder_recompute(shape) + ce * encoder_checkpointed(shape) + mixed);
  }
  double encoder_forward = 0.0;
  if (ce < e) encoder_forward = encoder_forward_plain(shape) + with_plain_rests;
  if (ce > 0) {
    encoder_forward =
        std::max(encoder_forward, encoder_forward_checkpointed(shape) + (ce - 1) * encoder_checkpointed(shape));
  }
  double forward = decoder_forward_plain(shape) + with_plain_rests + decoder_bottom + cd * decoder_checkpointed(shape) +
                   (d - cd) * decoder_plain(shape);
  if (cd > 0) {
    forward = std::max(forward, decoder_forward_checkpointed(shape) + with_checkpointed_rests +
                                    (cd - 1) * decoder_checkpointed(shape));
  }
  return std::max({0.0, encoder_forward, forward + decoder_adjust, decoder_phase + decoder_adjust,
                   encoder_phase + encoder_backward_adjust});
}

LossHeadModes loss_head_modes(const model::ModelConfig& config, const BatchShape& shape) {
  const kernels::LinearCrossEntropyOptions loss;
  const double tokens = static_cast<double>(shape.batch) * static_cast<double>(shape.target);
  const double vocab = static_cast<double>(config.vocab_size);
  LossHeadModes m;
  m.chunked = 4.0 * tokens * vocab > static_cast<double>(loss.keep_logits_bytes);
  m.kept = 4.0 * tokens * (vocab + static_cast<double>(config.d_model));
  m.chunk = 4.0 * tokens * std::min(vocab, std::max(256.0, std::floor(static_cast<double>(loss.chunk_bytes) / (4.0 * tokens))));
  return m;
}

double micro_step_flops(const model::ModelConfig& config, const BatchShape& shape, std::int64_t encoder_checkpointed,
                        std::int64_t decoder_checkpointed, double* recompute, bool frozen_base) {
  const auto f = model::forward_matmul_flops(config, shape.batch, shape.source, shape.target);
  const double again = static_cast<double>(encoder_checkpointed) * f.encoder_layer +
                       static_cast<double>(decoder_checkpointed) * f.decoder_layer;
  if (recompute) *recompute = again;
  const double training = model::training_matmul_flops(config, shape.batch, shape.source, shape.target);
  return (frozen_base ? training * 2.0 / 3.0 : training) + again;
}

model::ParameterCounts counts_with_frozen_embeddings(const model::ModelConfig& config) {
  auto counts = model::count_parameters(config);
  const auto elements = config.vocab_size * config.d_model;  // model.shared (and the tied LM head)
  counts.trainable -= elements;
  counts.frozen += elements;
  counts.matrix_elements -= elements;
  counts.matrix_rows_plus_cols -= config.vocab_size + config.d_model;
  counts.trainable_tensors.erase(counts.trainable_tensors.begin());  // model.shared, counted first
  return counts;
}

}  // namespace fitsum::memory
