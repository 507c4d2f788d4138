// The memory planner's calibration: what one micro-step of a model holds, measured on reduced-depth copies of it,
// per layer and per backward phase, and how fast it runs (memory/planner.h explains the model and uses it).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include <c10/core/Device.h>

#include "fitsum/memory/static_memory.h"
#include "fitsum/model/lora.h"
#include "fitsum/model/seq2seq.h"

namespace fitsum::memory {

struct BatchShape {
  std::int64_t batch = 1;
  std::int64_t source = 1;  // encoder tokens per row
  std::int64_t target = 1;  // label tokens per row
};

// Bytes as a function of the batch shape: c0 + B * (c1 S + c2 T + c3 S^2 + c4 T^2 + c5 S T).
struct ShapeFit {
  std::array<double, 6> coefficients{};
  double operator()(const BatchShape& shape) const;
};

// One micro-step's memory, per layer and per phase (see the top of this file). With E encoder layers of which the
// bottom ce are checkpointed and D decoder layers of which the bottom cd are:
//   encoder activations  A = (E - ce) encoder_plain + ce encoder_checkpointed
//   encoder forward      max(encoder_forward_plain + A                                            when ce < E,
//                            encoder_forward_checkpointed + (ce - 1) encoder_checkpointed        when ce > 0)
//   decoder forward      max(decoder_forward_plain + A + cd decoder_checkpointed + (D - cd) decoder_plain,
//                            decoder_forward_checkpointed + A + (cd - 1) decoder_checkpointed    when cd > 0)
//   decoder phase        max(decoder_rest + A + cd decoder_checkpointed + (D - cd) decoder_plain   when cd < D,
//                            decoder_recompute + A + cd decoder_checkpointed                        when cd > 0)
//   encoder phase        max(encoder_rest + A                                                       when ce < E,
//                            encoder_recompute + ce encoder_checkpointed (+ encoder_mixed when ce < E)  when ce > 0)
// (and decoder_mixed likewise in the decoder phase's recompute branch when 0 < cd < D)
// and the transient is the largest phase. A checkpointed layer's forward computes its full activations and drops
// them, while only the layers below it hold theirs: its peak does not add to the plain layers above it (bottom
// checkpointed encoder layers and plain ones above are the case where that matters). Plain layers above checkpointed
// ones can also leave something behind while the checkpointed ones recompute: T5's layers share one attention mask
// that carries the trained position bias, (B, heads, S, S), and the plain layers' backward leaves its accumulated
// gradient there. The `_mixed` terms hold that, measured on a copy with only its bottom layers checkpointed.
struct LayerMemory {
  ShapeFit encoder_plain;         // stored by one encoder layer that keeps its activations
  ShapeFit encoder_checkpointed;  // stored by one checkpointed encoder layer (its input)
  ShapeFit decoder_plain;
  ShapeFit decoder_checkpointed;
  ShapeFit decoder_rest;       // the decoder phase's rest with a plain top layer: embeddings, loss, the top's workspace
  ShapeFit decoder_recompute;  // the same while a checkpointed decoder layer recomputes its activations
  ShapeFit encoder_rest;
  ShapeFit encoder_recompute;
  ShapeFit encoder_forward_plain;         // the encoder forward's peak beyond its plain layers' activations
  ShapeFit encoder_forward_checkpointed;  // the encoder forward's peak while its one checkpointed layer runs
  ShapeFit decoder_forward_plain;         // the decoder forward's (and head's) peak beyond every stored activation
  ShapeFit decoder_forward_checkpointed;  // the same while its one checkpointed layer runs, beyond the encoder's
  ShapeFit encoder_mixed;  // the encoder phase's recompute beyond the above, with plain layers above (>= 0)
  ShapeFit decoder_mixed;  // the decoder phase's likewise
  // With a frozen base (LoRA) a stack's bottom layer is not like the others: its input (the embeddings) needs no
  // gradient, so kept plain it stores only what its adapters need, while checkpointed it stores its input like any
  // checkpointed layer. The rests above hold the bottom layers as they were in their probe (plain, or checkpointed
  // with the rest); these are what a checkpointed bottom layer stores beyond a plain one, beyond what an ordinary
  // layer's difference is (encoder_checkpointed - encoder_plain), measured on a copy with only its bottom encoder
  // layer checkpointed. Zero without adapters, where the bottom layer's input needs a gradient like every other's.
  ShapeFit encoder_bottom_checkpointed;
  ShapeFit decoder_bottom_checkpointed;
  // Transient bytes of a micro-step of `shape` with the bottom `encoder_checkpointed` / `decoder_checkpointed`
  // layers of `encoder_layers` / `decoder_layers` checkpointed. `decoder_adjust` is added to the phases after the
  // encoder's forward (the decoder's forward and backward), `encoder_backward_adjust` to the encoder's backward
  // phase (LossHeadModes: a shape whose loss head runs chunked).
  double transient(const BatchShape& shape, std::int64_t encoder_layers, std::int64_t decoder_layers,
                   std::int64_t checkpointed_encoder_layers, std::int64_t checkpointed_decoder_layers,
                   double decoder_adjust = 0.0, double encoder_backward_adjust = 0.0) const;
};

// Seconds of one micro-step: overhead + FLOPs / rate (FLOPs: the model's matrix products, plus the forward of each
// recomputed layer). The rate is the median of the probes' rates, the overhead a least-squares fit.
struct SpeedModel {
  double flops_per_second = 1e9;
  double overhead_seconds = 0.0;  // per micro-step: launch, data, the parts that do not scale with the FLOPs
  double seconds(double flops) const { return overhead_seconds + flops / flops_per_second; }
};

struct OptimizerCost {
  std::uint64_t transient_bytes = 0;  // temporaries of clip + step beyond the optimizer state
  double seconds = 0.0;               // clip + step over the whole model
  std::uint64_t peak_reserved_bytes = 0;  // the device's reserved peak during the measured step (CPU: allocated)
};

// The fused LM head and loss (kernels/loss.h) keep a micro-step's (M, V) logits, turned into their gradient, while
// they take at most LinearCrossEntropyOptions::keep_logits_bytes (M label tokens, V the vocabulary), and walk the
// vocabulary in chunks beyond. What the two modes hold differs by terms known exactly: kept, the saved gradient and
// its product with the head (4 M (V + D) bytes, from the head's forward until the backward pass ends); chunked, one
// chunk of logits at a time in the head's forward and backward (4 M chunk). Neither is there during the encoder's
// forward. The rests of the layer model are fitted in the first mode
// (samples of shapes that ran chunked are converted), and a prediction for a shape that runs chunked is converted
// back: the probes' few tokens must not decide which mode a large micro-batch is planned in.
struct LossHeadModes {
  bool chunked = false;  // `shape` runs in the chunked mode
  double kept = 0.0;     // bytes the kept mode holds beyond the chunked one, through the backward pass
  double chunk = 0.0;    // bytes of the chunked mode's chunk of logits
};
LossHeadModes loss_head_modes(const model::ModelConfig& config, const BatchShape& shape);

// Which layers of a probe copy recompute: none, all, only the bottom one of each stack (2 + 2 copy), or (with LoRA)
// only the bottom encoder layer (2 + 2 copy).
enum class ProbeCheckpointing { none, all, bottom, bottom_encoder };

struct ProbeSample {
  BatchShape shape;
  std::int64_t encoder_layers = 1;  // of the reduced-depth copy
  std::int64_t decoder_layers = 1;
  ProbeCheckpointing checkpointing = ProbeCheckpointing::none;
  std::uint64_t stored_bytes = 0;   // live when the forward pass ended
  std::uint64_t encoder_forward_bytes = 0;  // peak of the forward pass until the encoder's output
  std::uint64_t decoder_forward_bytes = 0;  // peak of the rest of the forward pass (decoder, head and loss)
  std::uint64_t decoder_phase_bytes = 0;    // peaks of the backward pass's two phases
  std::uint64_t encoder_phase_bytes = 0;
  double flops = 0.0;
  double seconds = 0.0;  // the fastest of the timed repetitions
  // The device's own peaks during the first repetition, everything live included (the copy, its gradients): what
  // torch.cuda.max_memory_allocated and max_memory_reserved say on CUDA, where reserved is the caching allocator's
  // segments; on the CPU, whose allocator caches nothing, reserved equals allocated.
  std::uint64_t peak_allocated_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
};

struct Calibration {
  model::ModelConfig config;         // the full model's
  // The full model's, with frozen embeddings moved out of the trainable count; with LoRA, the adapters (and what
  // LoraConfig trains beside them) trainable and the rest of the model frozen (lora_memory.h).
  model::ParameterCounts counts;
  std::uint64_t weight_bytes = 0;    // parameters and buffers as stored (fp32; bfloat16 for a bfloat16 LoRA base)
  std::uint64_t gradient_bytes = 0;  // one per trainable parameter
  std::int64_t encoder_layers = 0;
  std::int64_t decoder_layers = 0;
  std::int64_t encoder_unit = 1;  // encoder_layer_unit's: the layer model's encoder layer is this many of the model's
  bool bf16 = false;
  bool freeze_embeds = false;
  model::LoraConfig lora;      // r 0: full fine-tuning
  bool base_bfloat16 = false;  // LoRA's frozen base held in bfloat16 (--base_dtype bfloat16)
  LayerMemory memory;
  SpeedModel speed;
  OptimizerCost adamw;
  OptimizerCost adafactor;
  std::vector<ProbeSample> samples;
  double probe_seconds = 0.0;

  const OptimizerCost& optimizer(optim::OptimizerType kind) const {
    return kind == optim::OptimizerType::adamw_torch ? adamw : adafactor;
  }
};

struct CalibrationOptions {
  std::int64_t max_source_length = 512;  // probe shapes stay at or below these
  std::int64_t max_target_length = 128;
  bool bf16 = false;
  double label_smoothing = 0.0;
  bool freeze_embeds = false;  // the shared embedding (and through the tie the LM head) is not trained
  // Low-rank adapters (--lora_r etc.): the probe's copies carry them as the run will (lora_memory.h), so what frozen
  // layers and adapters keep for backward is measured like everything else.
  model::LoraConfig lora;
  bool base_bfloat16 = false;  // --base_dtype bfloat16, with LoRA only
};

// The encoder layers one step of the probe's depths adds. PEGASUS-X with stagger_local_blocks alternates two kinds of
// layer (every odd one pads its blocks by half a block at both ends, so its attention spans a block more), and a
// 1-layer copy has only the plain kind: its reduced copies have 2 and 4 encoder layers (1 and 2 decoder layers), so
// that "one encoder layer" of the layer model is a plain and a staggered layer together, the rest of each phase is
// measured with a staggered top layer as the full model's, and a full depth of E layers is E / 2 such units (an odd
// count of checkpointed layers counts as the even one below: a conservative prediction). 1 otherwise: an odd depth
// (its top layer is plain), and with LoRA (whose adapter counts come from a 2 + 2 copy).
std::int64_t encoder_layer_unit(const model::ModelConfig& config, bool lora);
// The shape the fits are evaluated at: for PEGASUS-X's blocks, the source padded to whole blocks plus half a block
// (a plain and a staggered layer together span 2 P + K positions for P padded ones), so that a unit's bytes are
// B times a linear function of it; the shape itself otherwise.
BatchShape fitted_shape(const model::ModelConfig& config, const BatchShape& shape);

// Runs the probe on reduced-depth copies of a model of `config`, built on `device`; the full model need not exist.
// The global random state is left as it was. Takes seconds, also for pegasus-large.
Calibration calibrate(const model::ModelConfig& config, const c10::Device& device, const CalibrationOptions& options);
// The same for an existing model's config and device (the model itself is not touched).
Calibration calibrate(model::Seq2SeqLMImpl& model, const CalibrationOptions& options);

// What the probe measured (the layer model, the speed, the optimizers' costs, the samples, the probe's seconds) as
// numbers, so that the processes of a data-parallel job plan with one process's probe; calibration_from_numbers puts
// them back beside what `config` and `options` give (parameter counts, bytes, depth). Throws std::invalid_argument
// naming what is wrong when `numbers` are not calibration_numbers' output.
std::vector<double> calibration_numbers(const Calibration& calibration);
Calibration calibration_from_numbers(const model::ModelConfig& config, const CalibrationOptions& options,
                                     const std::vector<double>& numbers);

// Matrix-product FLOPs of one micro-step of `shape` on a model of `config` with the bottom `encoder_checkpointed` /
// `decoder_checkpointed` layers recomputed; `recompute` (when given) receives the recomputation's share. With a
// `frozen_base` (LoRA) the backward pass computes the inputs' gradients but not the frozen weights': two forward
// passes' worth instead of three (the adapters' rank-r products are left out).
double micro_step_flops(const model::ModelConfig& config, const BatchShape& shape, std::int64_t encoder_checkpointed,
                        std::int64_t decoder_checkpointed, double* recompute = nullptr, bool frozen_base = false);

// Parameter counts with the shared embedding frozen (HF's --freeze_embeds): its elements leave the trainable
// count (no gradient, no optimizer state) and become frozen weights.
model::ParameterCounts counts_with_frozen_embeddings(const model::ModelConfig& config);

}  // namespace fitsum::memory
