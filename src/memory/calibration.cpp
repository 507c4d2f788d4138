// Implements include/fitsum/memory/calibration.h: the probe on reduced-depth copies, the per-layer fits and the
// speed model.
#include "fitsum/memory/calibration.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "fitsum/kernels/loss.h"
#include "fitsum/memory/device_memory.h"
#include "fitsum/memory/lora_memory.h"
#include "fitsum/model/micro_step.h"
#include "fitsum/optim/optimizer_step.h"
#include "fitsum/optim/optimizers.h"
#include "fitsum/util/device_timer.h"
#include "fitsum/util/random_state.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::memory {

namespace {


using Clock = std::chrono::steady_clock;

// Least squares for a small design matrix (rows x columns, row-major), in double precision.
std::vector<double> least_squares(const std::vector<std::vector<double>>& rows, const std::vector<double>& values) {
  const auto n = static_cast<std::int64_t>(rows.size());
  const auto k = static_cast<std::int64_t>(rows.front().size());
  auto a = torch::empty({n, k}, torch::kFloat64);
  auto b = torch::empty({n, 1}, torch::kFloat64);
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < k; ++j) a[i][j] = rows[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
    b[i][0] = values[static_cast<std::size_t>(i)];
  }
  // Columns differ by orders of magnitude (1 vs B S^2): scale them to unit norm for a well-conditioned solve.
  auto scale = a.norm(2, {0}).clamp_min(1e-30);
  auto solution =
      std::get<0>(torch::linalg_lstsq(a / scale, b, c10::nullopt, c10::optional<c10::string_view>("gelsd")));
  solution = solution.squeeze(1) / scale;
  std::vector<double> out(static_cast<std::size_t>(k));
  for (std::int64_t j = 0; j < k; ++j) out[static_cast<std::size_t>(j)] = solution[j].item<double>();
  return out;
}

// Exact bytes allocated by `work` beyond what was live when it started, on the CPU through the tracking allocator
// and on CUDA through the caching allocator's statistics.
// `peak_reserved` receives the device's reserved peak meanwhile (max_memory_reserved; the CPU's equals allocated).
template <typename Work>
std::uint64_t measure_transient(const c10::Device& device, Work&& work, std::uint64_t& peak_reserved) {
  const auto before = read_memory(device).current_bytes;
  reset_peak_memory(device);
  work();
  const auto after = read_memory(device);
  peak_reserved = static_cast<std::uint64_t>(after.peak_reserved_bytes);
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, after.peak_bytes - before));
}

// The optimizer step (with clipping) on one stand-alone tensor shaped like the model's largest parameter: its
// temporaries are per parameter, so the largest one sets the transient; the time scales with the elements.
OptimizerCost measure_optimizer(optim::OptimizerType type, const torch::Tensor& largest, std::int64_t elements,
                                const c10::Device& device) {
  struct Holder : torch::nn::Module {};
  auto holder = std::make_shared<Holder>();  // optimizers walk the module tree, which needs a shared_ptr
  // A copy of the probe copy's own weight (already drawn at the init's scale): drawing 98M fresh normals for
  // pegasus-large's embedding would cost half a second per optimizer.
  auto weight = holder->register_parameter("weight", largest.clone());
  weight.mutable_grad() = torch::full_like(weight, 1e-3);
  optim::OptimizerSettings settings;
  settings.type = type;
  settings.learning_rate = 1e-4;
  auto optimizer = optim::make_optimizer(*holder, settings);
  const std::vector<torch::Tensor> params{weight};
  optim::clip_grad_norm(params, 1.0);
  optimizer->step();  // allocates the state
  OptimizerCost cost;
  util::DeviceTimer timer(device);  // CUDA events around the step, or the host clock
  timer.start();
  cost.transient_bytes = measure_transient(device, [&] {
    optim::clip_grad_norm(params, 1.0);
    optimizer->step();
  }, cost.peak_reserved_bytes);
  const double seconds = timer.seconds();
  cost.seconds =
      seconds * static_cast<double>(elements) / static_cast<double>(std::max<std::int64_t>(1, weight.numel()));
  return cost;
}

}  // namespace
// ---- Fits ----

namespace {

std::vector<double> shape_features(const BatchShape& s) {
  const double b = static_cast<double>(s.batch), src = static_cast<double>(s.source),
               tgt = static_cast<double>(s.target);
  return {1.0, b * src, b * tgt, b * src * src, b * tgt * tgt, b * src * tgt};
}

// The terms a quantity can have: all six for the rest of a phase; for one encoder layer, only those of the source
// (its activations are B S d and B heads S^2 tensors); for one decoder layer, no S^2 (its self-attention is T^2,
// its cross-attention T S, its cross keys and values S).
enum class Terms { all, encoder_layer, decoder_layer };

ShapeFit fit_shape(const std::vector<BatchShape>& shapes, const std::vector<double>& values, Terms terms) {
  std::vector<std::size_t> used;
  switch (terms) {
    case Terms::all: used = {0, 1, 2, 3, 4, 5}; break;
    case Terms::encoder_layer: used = {0, 1, 3}; break;
    case Terms::decoder_layer: used = {0, 1, 2, 4, 5}; break;
  }
  std::vector<std::vector<double>> rows;
  for (const auto& shape : shapes) {
    const auto f = shape_features(shape);
    std::vector<double> row;
    for (const auto j : used) row.push_back(f[j]);
    rows.push_back(row);
  }
  const auto x = least_squares(rows, values);
  ShapeFit fit;
  for (std::size_t k = 0; k < used.size(); ++k) fit.coefficients[used[k]] = x[k];
  return fit;
}

}  // namespace

double ShapeFit::operator()(const BatchShape& shape) const {
  const auto f = shape_features(shape);
  double sum = 0.0;
  for (std::size_t i = 0; i < f.size(); ++i) sum += coefficients[i] * f[i];
  return sum;
}

// ---- Calibration ----

namespace {

// Probe shapes: at and below the run's longest lengths (a short-sequence run never probes longer sequences than it
// trains on), spread in S and T so that every term of the fits is seen. What a layer stores is B times a function of
// S and T, so micro-batch 2 at one cheap shape separates the constant. The 1 + 1 copy runs all seven (the rest of
// each phase has six terms, and the run's own lengths must be among them); the 2 + 2 copy, which only gives one
// layer's terms (at most five, exact products of B, S and T), runs the five cheapest, the first five here.
std::vector<BatchShape> probe_shapes(const CalibrationOptions& options) {
  const auto s = options.max_source_length, t = options.max_target_length;
  const auto src = [&](std::int64_t v) { return std::max<std::int64_t>(2, std::min(v, s)); };
  const auto tgt = [&](std::int64_t v) { return std::max<std::int64_t>(2, std::min(v, t)); };
  return {{1, src(s / 4), tgt(t / 4)}, {2, src(s / 4), tgt(t / 4)}, {1, src(s / 2), tgt(t / 2)},
          {1, src(s / 4), tgt(t)},     {1, src(s / 2), tgt(t / 4)}, {1, src(s), tgt(t / 4)},
          {1, src(s), tgt(t)}};
}
constexpr std::size_t kDeepProbeShapes = 5;

BatchShape warm_up_shape(const CalibrationOptions& options) {
  return {1, std::min<std::int64_t>(8, options.max_source_length), std::min<std::int64_t>(8, options.max_target_length)};
}

// The samples' shapes as the fits see them (fitted_shape).
std::vector<ProbeSample> fitted_samples(const model::ModelConfig& config, std::vector<ProbeSample> samples) {
  for (auto& sample : samples) sample.shape = fitted_shape(config, sample.shape);
  return samples;
}

// A reduced-depth copy: the same config with `encoder_layers` + `decoder_layers` layers, random weights, and the
// run's adapters.
model::Seq2SeqLM reduced_copy(const model::ModelConfig& config, std::int64_t encoder_layers,
                              std::int64_t decoder_layers, const c10::Device& device, const CalibrationOptions& options) {
  auto reduced = config;
  reduced.encoder_layers = encoder_layers;
  reduced.decoder_layers = decoder_layers;
  model::Seq2SeqLM copy(reduced);
  model::init_weights(*copy, 1234);
  copy->to(device);
  copy->train();
  if (options.freeze_embeds) copy->model->shared->weight.set_requires_grad(false);
  if (options.lora.enabled()) apply_planned_lora(*copy, options.lora, options.base_bfloat16);
  return copy;
}

// One micro-step of `shape` on `copy`, as the trainer runs it (model/micro_step.h), measured: the bytes stored when
// the forward pass ends and the peaks of the backward's two phases (split where the encoder output's gradient is
// complete), beyond what was live before; and its time.
ProbeSample measure_micro_step(model::Seq2SeqLMImpl& copy, const BatchShape& shape, const CalibrationOptions& options,
                               const c10::Device& device, int repetitions) {
  const auto vocab = copy.config().vocab_size;
  // Deterministic token ids that avoid the special ids 0 and 1; every position is a real token (no padding).
  auto ids = (torch::arange(shape.batch * shape.source, torch::kLong) % (vocab - 2) + 2)
                 .view({shape.batch, shape.source})
                 .to(device);
  auto mask = torch::ones({shape.batch, shape.source}, torch::TensorOptions(torch::kLong).device(device));
  auto labels = (torch::arange(shape.batch * shape.target, torch::kLong) * 7 % (vocab - 2) + 2)
                    .view({shape.batch, shape.target})
                    .to(device);
  ProbeSample sample;
  sample.shape = shape;
  sample.encoder_layers = copy.config().encoder_layers;
  sample.decoder_layers = copy.config().decoder_layers;
  sample.seconds = std::numeric_limits<double>::max();
  for (int r = 0; r < repetitions; ++r) {
    std::int64_t before = 0, decoder_peak = 0, encoder_forward_peak = 0;
    MemorySnapshot peaks;  // the micro-step's peaks of allocated and reserved bytes over the phases' reads
    const auto read = [&] {
      const auto m = read_memory(device);
      peaks.peak_bytes = std::max(peaks.peak_bytes, m.peak_bytes);
      peaks.peak_reserved_bytes = std::max(peaks.peak_reserved_bytes, m.peak_reserved_bytes);
      return m;
    };
    model::MicroBatchOptions micro;
    micro.loss_scale = 1.0 / static_cast<double>(shape.batch * shape.target);
    micro.label_smoothing = options.label_smoothing;
    micro.bf16 = options.bf16;
    micro.on_encoder_output = [&](torch::Tensor& encoded) {
      // The forward pass's encoder part ends here.
      encoder_forward_peak = read().peak_bytes;
      reset_peak_memory(device);
      if (!encoded.requires_grad()) return;
      encoded.register_hook([&](const torch::Tensor&) {
        decoder_peak = read().peak_bytes;
        reset_peak_memory(device);
      });
    };
    util::DeviceTimer timer(device);  // CUDA events around the micro-step, or the host clock
    timer.start();
    before = read_memory(device).current_bytes;
    reset_peak_memory(device);
    auto loss = model::micro_batch_loss(copy, ids, mask, labels, micro);
    const auto after_forward = read();
    reset_peak_memory(device);
    (loss.sum * micro.loss_scale).backward();
    const auto encoder_peak = read().peak_bytes;
    sample.seconds = std::min(sample.seconds, timer.seconds());
    if (r == 0) {
      const auto positive = [](std::int64_t v) { return static_cast<std::uint64_t>(std::max<std::int64_t>(0, v)); };
      sample.stored_bytes = positive(after_forward.current_bytes - before);
      sample.encoder_forward_bytes = positive(encoder_forward_peak - before);
      sample.decoder_forward_bytes = positive(after_forward.peak_bytes - before);
      sample.decoder_phase_bytes = positive(decoder_peak - before);
      sample.encoder_phase_bytes = positive(encoder_peak - before);
      sample.peak_allocated_bytes = positive(peaks.peak_bytes);
      sample.peak_reserved_bytes = positive(peaks.peak_reserved_bytes);
    }
  }
  return sample;
}

// Which bytes belong to which layer: per shape, the differences between the copies of 1 + 1 and 2 + 2 layers. The
// encoder phase holds only encoder activations, so its difference is one encoder layer's; the stored bytes'
// difference is one layer of each stack. Then each quantity is fitted in the shape.
const ProbeSample* find_sample(const std::vector<ProbeSample>& samples, const BatchShape& s, std::int64_t e,
                               std::int64_t d, ProbeCheckpointing checkpointing) {
  for (const auto& p : samples) {
    if (p.shape.batch == s.batch && p.shape.source == s.source && p.shape.target == s.target &&
        p.encoder_layers == e && p.decoder_layers == d && p.checkpointing == checkpointing) {
      return &p;
    }
  }
  return nullptr;
}

// With a frozen base, what a checkpointed bottom layer stores beyond a plain one, beyond an ordinary layer's
// difference (LayerMemory::encoder_bottom_checkpointed): from the stored bytes of the 2 + 2 copy with no layer, the
// bottom encoder layer, and the bottom layer of each stack checkpointed. Left zero without those probes.
void fit_bottom_layers(const std::vector<BatchShape>& deep, const std::vector<ProbeSample>& samples, LayerMemory& m) {
  std::vector<double> encoder, decoder;
  for (const auto& s : deep) {
    const auto* p22 = find_sample(samples, s, 2, 2, ProbeCheckpointing::none);
    const auto* e22 = find_sample(samples, s, 2, 2, ProbeCheckpointing::bottom_encoder);
    const auto* b22 = find_sample(samples, s, 2, 2, ProbeCheckpointing::bottom);
    if (!p22 || !e22 || !b22) return;
    const auto stored = [](const ProbeSample* p) { return static_cast<double>(p->stored_bytes); };
    encoder.push_back(stored(e22) - stored(p22) - (m.encoder_checkpointed(s) - m.encoder_plain(s)));
    decoder.push_back(stored(b22) - stored(e22) - (m.decoder_checkpointed(s) - m.decoder_plain(s)));
  }
  m.encoder_bottom_checkpointed = fit_shape(deep, encoder, Terms::encoder_layer);
  m.decoder_bottom_checkpointed = fit_shape(deep, decoder, Terms::decoder_layer);
}

LayerMemory fit_layer_memory(const std::vector<BatchShape>& shapes, const std::vector<ProbeSample>& samples,
                             std::int64_t unit) {
  const std::vector<BatchShape> deep(shapes.begin(), shapes.begin() + static_cast<std::ptrdiff_t>(kDeepProbeShapes));
  const auto find = [&](const BatchShape& s, std::int64_t e, std::int64_t d,
                        ProbeCheckpointing checkpointing) -> const ProbeSample& {
    if (const auto* p = find_sample(samples, s, e, d, checkpointing)) return *p;
    throw std::logic_error("planner probe: a sample is missing");
  };
  const auto value = [](std::uint64_t v) { return static_cast<double>(v); };
  constexpr auto none = ProbeCheckpointing::none, all = ProbeCheckpointing::all;
  // One layer of each stack, from the shapes both copies ran.
  std::vector<double> ep, ec, dp, dc;
  for (const auto& s : deep) {
    const auto& p11 = find(s, unit, 1, none);
    const auto& p22 = find(s, 2 * unit, 2, none);
    const auto& c11 = find(s, unit, 1, all);
    const auto& c22 = find(s, 2 * unit, 2, all);
    ep.push_back(value(p22.encoder_phase_bytes) - value(p11.encoder_phase_bytes));
    dp.push_back(value(p22.stored_bytes) - value(p11.stored_bytes) - ep.back());
    ec.push_back(value(c22.encoder_phase_bytes) - value(c11.encoder_phase_bytes));
    dc.push_back(value(c22.stored_bytes) - value(c11.stored_bytes) - ec.back());
  }
  LayerMemory m;
  m.encoder_plain = fit_shape(deep, ep, Terms::encoder_layer);
  m.encoder_checkpointed = fit_shape(deep, ec, Terms::encoder_layer);
  m.decoder_plain = fit_shape(deep, dp, Terms::decoder_layer);
  m.decoder_checkpointed = fit_shape(deep, dc, Terms::decoder_layer);
  // The rest of each phase: the 1 + 1 copy's bytes less its one layer of each stack, at every shape.
  std::vector<double> dr, drc, er, erc, efp, efc, dfp, dfc;
  for (const auto& s : shapes) {
    const auto& p11 = find(s, unit, 1, none);
    const auto& c11 = find(s, unit, 1, all);
    efp.push_back(value(p11.encoder_forward_bytes) - m.encoder_plain(s));
    efc.push_back(value(c11.encoder_forward_bytes));
    dfp.push_back(value(p11.decoder_forward_bytes) - m.encoder_plain(s) - m.decoder_plain(s));
    dfc.push_back(value(c11.decoder_forward_bytes) - m.encoder_checkpointed(s));
    dr.push_back(value(p11.decoder_phase_bytes) - m.encoder_plain(s) - m.decoder_plain(s));
    drc.push_back(value(c11.decoder_phase_bytes) - m.encoder_checkpointed(s) - m.decoder_checkpointed(s));
    er.push_back(value(p11.encoder_phase_bytes) - m.encoder_plain(s));
    erc.push_back(value(c11.encoder_phase_bytes) - m.encoder_checkpointed(s));
  }
  m.decoder_rest = fit_shape(shapes, dr, Terms::all);
  m.decoder_recompute = fit_shape(shapes, drc, Terms::all);
  m.encoder_rest = fit_shape(shapes, er, Terms::all);
  m.encoder_recompute = fit_shape(shapes, erc, Terms::all);
  m.encoder_forward_plain = fit_shape(shapes, efp, Terms::all);
  m.encoder_forward_checkpointed = fit_shape(shapes, efc, Terms::all);
  m.decoder_forward_plain = fit_shape(shapes, dfp, Terms::all);
  m.decoder_forward_checkpointed = fit_shape(shapes, dfc, Terms::all);
  // The 2 + 2 copy with its bottom layers checkpointed and the top ones plain: what its recompute phases hold beyond
  // the all-checkpointed model of them (LayerMemory).
  std::vector<double> em, dm;
  for (const auto& s : deep) {
    const auto& b22 = find(s, 2 * unit, 2, ProbeCheckpointing::bottom);
    const double activations = m.encoder_plain(s) + m.encoder_checkpointed(s);
    em.push_back(value(b22.encoder_phase_bytes) - m.encoder_recompute(s) - m.encoder_checkpointed(s));
    dm.push_back(value(b22.decoder_phase_bytes) - m.decoder_recompute(s) - activations - m.decoder_checkpointed(s));
  }
  m.encoder_mixed = fit_shape(deep, em, Terms::encoder_layer);
  m.decoder_mixed = fit_shape(deep, dm, Terms::decoder_layer);
  fit_bottom_layers(deep, samples, m);
  return m;
}

// seconds = overhead + flops / rate over the probes (29 micro-steps of two depths and three modes): the
// overhead by least squares (0 when noise makes it negative), the rate as the median of the samples' own rates
// after the overhead, so a few probes slowed by another process do not move it.
SpeedModel fit_speed(const std::vector<ProbeSample>& samples) {
  std::vector<std::vector<double>> rows;
  std::vector<double> seconds;
  for (const auto& p : samples) {
    rows.push_back({1.0, p.flops});
    seconds.push_back(p.seconds);
  }
  SpeedModel speed;
  const auto x = least_squares(rows, seconds);
  speed.overhead_seconds = std::max(0.0, x[0]);
  std::vector<double> rates;
  for (const auto& p : samples) {
    const double compute = p.seconds - speed.overhead_seconds;
    if (compute > 0.0) rates.push_back(p.flops / compute);
  }
  if (rates.empty()) return speed;
  std::nth_element(rates.begin(), rates.begin() + static_cast<std::ptrdiff_t>(rates.size() / 2), rates.end());
  speed.flops_per_second = rates[rates.size() / 2];
  return speed;
}

}  // namespace

namespace {

// What a calibration holds before the probe: what the config and the options say.
Calibration unmeasured(const model::ModelConfig& config, const CalibrationOptions& options) {
  Calibration c;
  c.config = config;
  c.freeze_embeds = options.freeze_embeds;
  c.counts = options.freeze_embeds ? counts_with_frozen_embeddings(config) : model::count_parameters(config);
  c.weight_bytes = static_cast<std::uint64_t>(c.counts.total()) * 4;  // fp32 storage (bf16 autocasts only)
  c.gradient_bytes = static_cast<std::uint64_t>(c.counts.trainable) * 4;
  c.encoder_layers = config.encoder_layers;
  c.decoder_layers = config.decoder_layers;
  c.encoder_unit = encoder_layer_unit(config, options.lora.enabled());
  c.bf16 = options.bf16;
  c.lora = options.lora;
  c.base_bfloat16 = options.lora.enabled() && options.base_bfloat16;
  return c;
}

void set_lora_memory(Calibration& c, const LoraMemory& lora) {
  c.counts = lora.counts;
  c.weight_bytes = lora.weight_bytes;
  c.gradient_bytes = static_cast<std::uint64_t>(c.counts.trainable) * 4;  // the adapters train in float32
}

template <typename LayerMemoryT>
auto fits_of(LayerMemoryT& m) {
  return std::array{&m.encoder_plain,         &m.encoder_checkpointed,
                    &m.decoder_plain,         &m.decoder_checkpointed,
                    &m.decoder_rest,          &m.decoder_recompute,
                    &m.encoder_rest,          &m.encoder_recompute,
                    &m.encoder_forward_plain, &m.encoder_forward_checkpointed,
                    &m.decoder_forward_plain, &m.decoder_forward_checkpointed,
                    &m.encoder_mixed,         &m.decoder_mixed,
                    &m.encoder_bottom_checkpointed, &m.decoder_bottom_checkpointed};
}

constexpr double kNumbersVersion = 3.0;
constexpr std::size_t kSampleNumbers = 15;

}  // namespace

std::vector<double> calibration_numbers(const Calibration& c) {
  std::vector<double> n{kNumbersVersion};
  for (const auto* fit : fits_of(c.memory)) n.insert(n.end(), fit->coefficients.begin(), fit->coefficients.end());
  n.insert(n.end(), {c.speed.flops_per_second, c.speed.overhead_seconds});
  for (const auto* cost : {&c.adamw, &c.adafactor}) {
    n.insert(n.end(), {static_cast<double>(cost->transient_bytes), cost->seconds,
                       static_cast<double>(cost->peak_reserved_bytes)});
  }
  n.insert(n.end(), {c.probe_seconds, static_cast<double>(c.samples.size())});
  for (const auto& s : c.samples) {
    n.insert(n.end(), {static_cast<double>(s.shape.batch), static_cast<double>(s.shape.source),
                       static_cast<double>(s.shape.target), static_cast<double>(s.encoder_layers),
                       static_cast<double>(s.decoder_layers), static_cast<double>(s.checkpointing),
                       static_cast<double>(s.stored_bytes), static_cast<double>(s.encoder_forward_bytes),
                       static_cast<double>(s.decoder_forward_bytes), static_cast<double>(s.decoder_phase_bytes),
                       static_cast<double>(s.encoder_phase_bytes), s.flops, s.seconds,
                       static_cast<double>(s.peak_allocated_bytes), static_cast<double>(s.peak_reserved_bytes)});
  }
  return n;
}

Calibration calibration_from_numbers(const model::ModelConfig& config, const CalibrationOptions& options,
                                     const std::vector<double>& numbers) {
  auto c = unmeasured(config, options);
  if (options.lora.enabled()) set_lora_memory(c, lora_memory(config, options.lora, options.base_bfloat16));
  // The version, the fits' coefficients, the speed (2), the optimizers' costs (2 x 3), the probe's seconds, the
  // number of samples.
  const std::size_t fixed = 1 + fits_of(c.memory).size() * ShapeFit{}.coefficients.size() + 2 + 2 * 3 + 2;
  if (numbers.size() < fixed || numbers[0] != kNumbersVersion) {
    throw std::invalid_argument("calibration numbers: " + std::to_string(numbers.size()) +
                                " numbers, not a calibration's (version " + std::to_string(kNumbersVersion) + ")");
  }
  std::size_t at = 1;
  const auto next = [&] { return numbers[at++]; };
  const auto count = [&](const char* what) {
    const double v = next();
    if (!(v >= 0.0) || v != std::floor(v) || v > 9007199254740992.0) {
      throw std::invalid_argument(std::string("calibration numbers: ") + what + " is " + std::to_string(v) +
                                  ", not a count");
    }
    return v;
  };
  for (auto* fit : fits_of(c.memory)) {
    for (auto& k : fit->coefficients) k = next();
  }
  c.speed.flops_per_second = next();
  c.speed.overhead_seconds = next();
  for (auto* cost : {&c.adamw, &c.adafactor}) {
    cost->transient_bytes = static_cast<std::uint64_t>(count("an optimizer's transient bytes"));
    cost->seconds = next();
    cost->peak_reserved_bytes = static_cast<std::uint64_t>(count("an optimizer's reserved bytes"));
  }
  c.probe_seconds = next();
  const auto samples = static_cast<std::size_t>(count("the number of samples"));
  if (numbers.size() != fixed + samples * kSampleNumbers) {
    throw std::invalid_argument("calibration numbers: " + std::to_string(numbers.size()) + " numbers for " +
                                std::to_string(samples) + " samples, not " +
                                std::to_string(fixed + samples * kSampleNumbers));
  }
  for (std::size_t i = 0; i < samples; ++i) {
    ProbeSample s;
    s.shape.batch = static_cast<std::int64_t>(count("a sample's batch"));
    s.shape.source = static_cast<std::int64_t>(count("a sample's source"));
    s.shape.target = static_cast<std::int64_t>(count("a sample's target"));
    s.encoder_layers = static_cast<std::int64_t>(count("a sample's encoder layers"));
    s.decoder_layers = static_cast<std::int64_t>(count("a sample's decoder layers"));
    const auto checkpointing = count("a sample's checkpointing");
    if (checkpointing > static_cast<double>(ProbeCheckpointing::bottom_encoder)) {
      throw std::invalid_argument("calibration numbers: a sample's checkpointing is " + std::to_string(checkpointing));
    }
    s.checkpointing = static_cast<ProbeCheckpointing>(static_cast<int>(checkpointing));
    for (auto* bytes : {&s.stored_bytes, &s.encoder_forward_bytes, &s.decoder_forward_bytes, &s.decoder_phase_bytes,
                        &s.encoder_phase_bytes}) {
      *bytes = static_cast<std::uint64_t>(count("a sample's bytes"));
    }
    s.flops = next();
    s.seconds = next();
    s.peak_allocated_bytes = static_cast<std::uint64_t>(count("a sample's peak allocated bytes"));
    s.peak_reserved_bytes = static_cast<std::uint64_t>(count("a sample's peak reserved bytes"));
    c.samples.push_back(s);
  }
  return c;
}

Calibration calibrate(const model::ModelConfig& config, const c10::Device& device, const CalibrationOptions& options) {
  util::DeviceTimer probe_timer(device);  // its end waits for the device's work
  probe_timer.start();
  start_tracking(device);
  auto c = unmeasured(config, options);

  // Random numbers drawn here (weights, dropout) must not shift the training run's.
  util::RandomStateGuard keep_random_state(device);
  const auto shapes = probe_shapes(options);
  const auto all = std::numeric_limits<std::int64_t>::max();
  torch::Tensor largest;
  for (const std::int64_t depth : {1, 2}) {
    const auto e = depth * c.encoder_unit, d = depth;
    auto copy = reduced_copy(config, e, d, device, options);
    if (depth == 2 && options.lora.enabled()) set_lora_memory(c, lora_memory(*copy, config));
    std::vector<ProbeCheckpointing> modes{ProbeCheckpointing::none, ProbeCheckpointing::all};
    if (depth == 2) modes.push_back(ProbeCheckpointing::bottom);
    if (depth == 2 && options.lora.enabled()) modes.push_back(ProbeCheckpointing::bottom_encoder);
    for (const auto checkpointing : modes) {
      const auto layers = checkpointing == ProbeCheckpointing::none  ? std::int64_t{0}
                          : checkpointing == ProbeCheckpointing::all ? all
                                                                     : std::int64_t{1};
      const auto decoder_layers = checkpointing == ProbeCheckpointing::bottom_encoder ? 0 : layers;
      // The bottom unit of the encoder: one layer, or a plain and a staggered one.
      const auto encoder_layers = layers == 1 ? c.encoder_unit : layers;
      copy->set_gradient_checkpointing(encoder_layers, decoder_layers);
      // Warm-up: allocates the gradients (kept between steps, as optim::zero_gradients keeps them) and first-use
      // buffers, so each probe sees only its own transient. A tiny batch does that as well as a real one: the
      // gradients have the parameters' sizes whatever the shape (at pegasus-large's widths a real shape costs a
      // second per warm-up).
      measure_micro_step(*copy, warm_up_shape(options), options, device, 1);
      const auto count = depth == 1 ? shapes.size() : kDeepProbeShapes;
      for (std::size_t i = 0; i < count; ++i) {
        const auto& shape = shapes[i];
        auto sample = measure_micro_step(*copy, shape, options, device, 1);
        sample.checkpointing = checkpointing;
        sample.flops = micro_step_flops(copy->config(), shape, std::min(encoder_layers, e), std::min(decoder_layers, d),
                                        nullptr, options.lora.enabled());
        c.samples.push_back(sample);
      }
    }
    if (depth == 1) {
      for (const auto& p : copy->parameters()) {
        if (p.requires_grad() && (!largest.defined() || p.numel() > largest.numel())) largest = p;
      }
      largest = largest.detach().clone();  // outlives the copy
    }
  }
  for (auto& sample : c.samples) {
    // In the kept mode, as the fits assume (LossHeadModes).
    const auto head = loss_head_modes(config, sample.shape);
    if (!head.chunked) continue;
    const auto kept = static_cast<std::uint64_t>(head.kept), chunk = static_cast<std::uint64_t>(head.chunk);
    sample.stored_bytes += kept;
    sample.decoder_forward_bytes += kept - chunk;  // chunk <= 4 M V < kept
    sample.decoder_phase_bytes += kept - chunk;
    sample.encoder_phase_bytes += kept;
  }
  std::vector<BatchShape> fitted;
  for (const auto& shape : shapes) fitted.push_back(fitted_shape(config, shape));
  c.memory = fit_layer_memory(fitted, fitted_samples(config, c.samples), c.encoder_unit);
  c.speed = fit_speed(c.samples);
  // The optimizer's temporaries are per parameter, so the largest sets the transient (the copies share the full
  // model's widths, so theirs is the full model's largest); the time scales with the elements.
  c.adamw = measure_optimizer(optim::OptimizerType::adamw_torch, largest, c.counts.trainable, device);
  c.adafactor = measure_optimizer(optim::OptimizerType::adafactor, largest, c.counts.trainable, device);
  // The probe's copies, batches and optimizer state are gone; on CUDA their blocks would stay cached (reserved) for
  // the rest of the run, so training's reserved peak would be the probe's plus what training could not fit into
  // those blocks (the planner models training alone).
  largest = torch::Tensor();
  release_cached_memory(device);
  c.probe_seconds = probe_timer.seconds();
  return c;
}

Calibration calibrate(model::Seq2SeqLMImpl& model, const CalibrationOptions& options) {
  return calibrate(model.config(), model.parameters().front().device(), options);
}
}  // namespace fitsum::memory
