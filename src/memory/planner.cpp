// Implements include/fitsum/memory/planner.h: the budget, the calibration probe and its fits, prediction and the
// choice of a plan.
#include "fitsum/memory/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <torch/torch.h>

#include "fitsum/memory/device_memory.h"
#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/model/micro_step.h"
#include "fitsum/optim/optimizer_step.h"
#include "fitsum/optim/optimizers.h"
#include "fitsum/util/bytes.h"
#include "fitsum/util/random_state.h"
#include "fitsum/util/torch_compat.h"

#ifdef FITSUM_WITH_CUDA
#include <cuda_runtime_api.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

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

std::vector<double> activation_features(const BatchShape& s) {
  const double b = static_cast<double>(s.batch), src = static_cast<double>(s.source),
               tgt = static_cast<double>(s.target);
  return {1.0, b * src, b * tgt, b * src * src, b * tgt * tgt, b * src * tgt};
}

std::vector<double> end_features(const BatchShape& s) {
  const double b = static_cast<double>(s.batch);
  return {1.0, b * static_cast<double>(s.source), b * static_cast<double>(s.target)};
}

// Fits the two phases of ActivationFit to measured peaks (a maximum of two forms): probes are assigned to the
// phase that explains them better and each phase is refitted to its probes until the assignment settles. Starts
// from the larger half of the probes in the stored-activations phase.
ActivationFit fit_activations(const std::vector<BatchShape>& shapes, const std::vector<double>& bytes) {
  const std::size_t n = shapes.size();
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return bytes[a] > bytes[b]; });
  std::vector<bool> stored(n, false);
  for (std::size_t k = 0; k < (n + 1) / 2; ++k) stored[order[k]] = true;
  ActivationFit fit;
  const auto refit = [&](bool in_stored, std::size_t columns, auto features, double* out) {
    std::vector<std::vector<double>> rows;
    std::vector<double> values;
    for (std::size_t i = 0; i < n; ++i) {
      if (stored[i] != in_stored) continue;
      rows.push_back(features(shapes[i]));
      values.push_back(bytes[i]);
    }
    if (rows.size() < columns) return false;
    const auto x = least_squares(rows, values);
    std::copy(x.begin(), x.end(), out);
    return true;
  };
  for (int iteration = 0; iteration < 20; ++iteration) {
    const bool ok_stored = refit(true, 6, activation_features, fit.coefficients.data());
    const bool ok_end = refit(false, 3, end_features, fit.end_coefficients.data());
    if (!ok_stored || !ok_end) break;
    bool changed = false;
    for (std::size_t i = 0; i < n; ++i) {
      double a = 0.0, e = 0.0;
      const auto f = activation_features(shapes[i]);
      for (std::size_t j = 0; j < f.size(); ++j) a += fit.coefficients[j] * f[j];
      const auto g = end_features(shapes[i]);
      for (std::size_t j = 0; j < g.size(); ++j) e += fit.end_coefficients[j] * g[j];
      const bool now_stored = std::abs(a - bytes[i]) <= std::abs(e - bytes[i]);
      changed = changed || now_stored != stored[i];
      stored[i] = now_stored;
    }
    if (!changed) return fit;
  }
  // No stable split (e.g. every probe in one phase): one form over all probes, as a single phase.
  std::vector<std::vector<double>> rows;
  for (const auto& shape : shapes) rows.push_back(activation_features(shape));
  const auto x = least_squares(rows, bytes);
  std::copy(x.begin(), x.end(), fit.coefficients.begin());
  fit.end_coefficients = {};
  return fit;
}

std::vector<double> time_features(const BatchShape& s) {
  const double b = static_cast<double>(s.batch), src = static_cast<double>(s.source),
               tgt = static_cast<double>(s.target);
  return {1.0, b * (src + tgt), b * (src * src + tgt * tgt + src * tgt)};
}

std::uint64_t bytes_of(const torch::Tensor& t) { return static_cast<std::uint64_t>(t.numel() * t.element_size()); }

// Exact bytes allocated by `work` beyond what was live when it started, on the CPU through the tracking allocator
// and on CUDA through the caching allocator's statistics.
template <typename Work>
std::uint64_t measure_transient(const c10::Device& device, Work&& work) {
  const auto before = read_memory(device).current_bytes;
  reset_peak_memory(device);
  work();
  const auto peak = read_memory(device).peak_bytes;
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, peak - before));
}

void synchronize(const c10::Device& device) {
#ifdef FITSUM_WITH_CUDA
  if (device.is_cuda()) torch::cuda::synchronize();
#endif
}

// One micro-step as the trainer runs it: forward, summed token loss, backward.
void micro_step(model::Seq2SeqLMImpl& model, const BatchShape& shape, const CalibrationOptions& options,
                const c10::Device& device) {
  const auto vocab = model.config().vocab_size;
  // Deterministic token ids that avoid the special ids 0 and 1; every position is a real token (no padding).
  auto ids = (torch::arange(shape.batch * shape.source, torch::kLong) % (vocab - 2) + 2)
                 .view({shape.batch, shape.source})
                 .to(device);
  auto mask = torch::ones({shape.batch, shape.source}, torch::TensorOptions(torch::kLong).device(device));
  auto labels = (torch::arange(shape.batch * shape.target, torch::kLong) * 7 % (vocab - 2) + 2)
                    .view({shape.batch, shape.target})
                    .to(device);
  // Exactly the micro-step the trainer runs (model/micro_step.h), so what is measured is what training allocates.
  model::MicroBatchOptions micro;
  micro.loss_scale = 1.0 / static_cast<double>(shape.batch * shape.target);
  micro.label_smoothing = options.label_smoothing;
  micro.bf16 = options.bf16;
  model::forward_backward(model, ids, mask, labels, micro);
}

// The optimizer step (with clipping) on one stand-alone tensor shaped like the model's largest parameter: its
// temporaries are per parameter, so the largest one sets the transient; the time scales with the elements.
OptimizerCost measure_optimizer(optim::OptimizerType type, const torch::Tensor& largest, std::int64_t elements,
                                const c10::Device& device) {
  struct Holder : torch::nn::Module {};
  auto holder = std::make_shared<Holder>();  // optimizers walk the module tree, which needs a shared_ptr
  auto weight = holder->register_parameter("weight", torch::zeros_like(largest).normal_(0.0, 0.02));
  weight.mutable_grad() = torch::full_like(weight, 1e-3);
  optim::OptimizerSettings settings;
  settings.type = type;
  settings.learning_rate = 1e-4;
  auto optimizer = optim::make_optimizer(*holder, settings);
  const std::vector<torch::Tensor> params{weight};
  optim::clip_grad_norm(params, 1.0);
  optimizer->step();  // allocates the state
  synchronize(device);
  OptimizerCost cost;
  const auto start = Clock::now();
  cost.transient_bytes = measure_transient(device, [&] {
    optim::clip_grad_norm(params, 1.0);
    optimizer->step();
  });
  synchronize(device);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  cost.seconds =
      seconds * static_cast<double>(elements) / static_cast<double>(std::max<std::int64_t>(1, weight.numel()));
  return cost;
}

}  // namespace

// ---- The budget ----

std::uint64_t available_memory(const c10::Device& device) {
#ifdef FITSUM_WITH_CUDA
  if (device.is_cuda()) {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      throw std::runtime_error("max_memory auto: cudaMemGetInfo failed");
    }
    return free_bytes;
  }
#endif
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  throw std::runtime_error("max_memory auto: MemAvailable not found in /proc/meminfo; give a size instead");
}

std::uint64_t resolve_memory_budget(const std::string& spec, const c10::Device& device) {
  if (spec == "auto") return available_memory(device);
  const auto bytes = util::parse_bytes(spec);
  if (bytes == 0) throw std::invalid_argument("max_memory must be above 0 (or 'auto')");
  return bytes;
}

void apply_memory_budget(const c10::Device& device, std::uint64_t bytes) {
#ifdef FITSUM_WITH_CUDA
  if (device.is_cuda()) {
    // The fraction is of the whole device; what the CUDA context already holds is outside the caching allocator.
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess || total_bytes == 0) {
      throw std::runtime_error("max_memory: cudaMemGetInfo failed");
    }
    const double fraction =
        bytes == 0 ? 1.0 : std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total_bytes));
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device.index() < 0 ? 0 : device.index());
    return;
  }
#endif
  TrackingCpuAllocator::instance().set_limit(static_cast<std::int64_t>(bytes));
}

// ---- Fits ----

double ActivationFit::predict(const BatchShape& shape) const {
  const auto f = activation_features(shape);
  double stored = 0.0;
  for (std::size_t i = 0; i < f.size(); ++i) stored += coefficients[i] * f[i];
  const auto g = end_features(shape);
  double end = 0.0;
  for (std::size_t i = 0; i < g.size(); ++i) end += end_coefficients[i] * g[i];
  return std::max({0.0, stored, end});
}

double TimeFit::predict(const BatchShape& shape) const {
  const auto f = time_features(shape);
  double sum = 0.0;
  for (std::size_t i = 0; i < f.size(); ++i) sum += coefficients[i] * f[i];
  return std::max(floor_seconds, sum);
}

// ---- Calibration ----

namespace {

// Probe shapes: small, yet spread in B, S and T so that every term of the fit is seen; capped at the lengths the
// run will use, so a short-sequence run never probes longer sequences than it trains on. The transient is a
// maximum over phases (the stored activations at the start of backward grow with B; the dense embedding gradients
// at its end do not), so the probes reach micro-batch 8 at short lengths to see the regime that large micro-batches
// are in, and include micro-batches 1, 2 and 4 at the longest lengths.
std::vector<BatchShape> probe_shapes(const CalibrationOptions& options) {
  const auto src = [&](std::int64_t s) { return std::max<std::int64_t>(2, std::min(s, options.max_source_length)); };
  const auto tgt = [&](std::int64_t t) { return std::max<std::int64_t>(2, std::min(t, options.max_target_length)); };
  const auto s_max = options.max_source_length, t_max = options.max_target_length;
  return {{1, src(32), tgt(16)},
          {1, src(128), tgt(16)},
          {1, src(64), tgt(48)},
          {2, src(64), tgt(16)},
          {2, src(32), tgt(64)},
          {2, src(128), tgt(48)},
          {4, src(32), tgt(16)},
          {4, src(64), tgt(32)},
          {4, src(128), tgt(16)},
          {4, src(128), tgt(64)},
          {8, src(32), tgt(16)},
          {8, src(32), tgt(48)},
          {8, src(64), tgt(32)},
          {8, src(128), tgt(32)},
          {8, src(64), tgt(64)},
          {1, src(128), tgt(64)},
          // At the run's own lengths (Marian's --mini-batch-fit idea): with checkpointing, one layer's recomputed
          // attention (B x heads x S^2) only outgrows the constant phase at long sources, which short probes miss.
          {1, src(s_max), tgt(t_max)},
          {2, src(s_max), tgt(t_max)},
          {1, src(s_max / 2), tgt(t_max)},
          {2, src(s_max / 2), tgt(t_max / 2)},
          {4, src(s_max), tgt(t_max)},
          {4, src(s_max / 2), tgt(t_max)}};
}

// Every probe shape once, with checkpointing of all layers or none: measured transients and times, and their fits.
void probe_mode(model::Seq2SeqLMImpl& model, const std::vector<BatchShape>& shapes, bool checkpointed,
                const CalibrationOptions& options, const c10::Device& device, Calibration& c) {
  const auto all = std::numeric_limits<std::int64_t>::max();
  model.set_gradient_checkpointing(checkpointed ? all : 0, checkpointed ? all : 0);
  micro_step(model, shapes.front(), options, device);  // warm-up of this code path
  std::vector<std::vector<double>> time_rows;
  std::vector<double> bytes, seconds;
  double fastest = std::numeric_limits<double>::max();
  for (const auto& shape : shapes) {
    ProbeSample sample;
    sample.shape = shape;
    sample.checkpointed = checkpointed;
    synchronize(device);
    const auto t0 = Clock::now();
    sample.transient_bytes = measure_transient(device, [&] { micro_step(model, shape, options, device); });
    synchronize(device);
    sample.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    bytes.push_back(static_cast<double>(sample.transient_bytes));
    time_rows.push_back(time_features(shape));
    seconds.push_back(sample.seconds);
    fastest = std::min(fastest, sample.seconds);
    c.samples.push_back(sample);
  }
  const auto t = least_squares(time_rows, seconds);
  auto& time = checkpointed ? c.time_checkpointed : c.time_plain;
  (checkpointed ? c.activations_checkpointed : c.activations_plain) = fit_activations(shapes, bytes);
  std::copy(t.begin(), t.end(), time.coefficients.begin());
  time.floor_seconds = fastest;
}

}  // namespace

Calibration calibrate(model::Seq2SeqLMImpl& model, const CalibrationOptions& options) {
  const auto start = Clock::now();
  const auto& config = model.config();
  const auto device = model.parameters().front().device();
  start_tracking(device);
  Calibration c;
  c.counts = model::count_parameters(config);
  c.encoder_layers = config.encoder_layers;
  c.decoder_layers = config.decoder_layers;
  c.bf16 = options.bf16;
  torch::Tensor largest;
  for (const auto& p : model.parameters()) {
    c.weight_bytes += bytes_of(p);
    if (p.requires_grad()) c.gradient_bytes += bytes_of(p);
    if (p.requires_grad() && (!largest.defined() || p.numel() > largest.numel())) largest = p;
  }
  for (const auto& b : model.buffers()) c.weight_bytes += bytes_of(b);

  // Dropout draws of the probe must not shift the training run's random numbers.
  util::RandomStateGuard keep_random_state(device);
  const bool was_training = model.is_training();
  model.train();
  const auto shapes = probe_shapes(options);
  // Warm-up: allocates the gradients (kept between steps, as the trainer's zero_grad keeps them) and first-use
  // buffers, so each probe sees only its own transient.
  micro_step(model, shapes.front(), options, device);
  for (bool checkpointed : {false, true}) probe_mode(model, shapes, checkpointed, options, device, c);
  model.set_gradient_checkpointing(0, 0);
  for (auto& p : model.parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
  if (!was_training) model.eval();

  c.adamw = measure_optimizer(optim::OptimizerType::adamw_torch, largest.detach(), c.counts.trainable, device);
  c.adafactor = measure_optimizer(optim::OptimizerType::adafactor, largest.detach(), c.counts.trainable, device);
  c.probe_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return c;
}

// ---- Prediction ----

Prediction predict(const Calibration& c, const PlanKnobs& knobs, const BatchShape& worst) {
  const BatchShape shape{knobs.micro_batch, worst.source, worst.target};
  const auto layers = std::max<std::int64_t>(1, std::max(c.encoder_layers, c.decoder_layers));
  const double fraction = static_cast<double>(std::min(std::max<std::int64_t>(knobs.checkpointed_layers, 0), layers)) /
                          static_cast<double>(layers);
  Prediction p;
  const auto fixed = static_training_memory(c.counts, knobs.optimizer, StorageDtype::fp32);
  p.weights = c.weight_bytes;
  p.gradients = c.gradient_bytes;
  p.optimizer_state = fixed.optimizer_state;
  const double plain = c.activations_plain.predict(shape);
  const double checkpointed = c.activations_checkpointed.predict(shape);
  p.activations = static_cast<std::uint64_t>(std::llround(plain + fraction * (checkpointed - plain)));
  p.optimizer_transient = c.optimizer(knobs.optimizer).transient_bytes;
  p.peak = p.weights + p.gradients + p.optimizer_state + std::max(p.activations, p.optimizer_transient);
  // Recomputing never makes a step faster: timing noise at the probe's small shapes must not say otherwise.
  const double plain_seconds = c.time_plain.predict(shape);
  const double recompute_seconds = std::max(0.0, c.time_checkpointed.predict(shape) - plain_seconds);
  const double micro_seconds = plain_seconds + fraction * recompute_seconds;
  p.step_seconds = static_cast<double>(knobs.accumulation) * micro_seconds + c.optimizer(knobs.optimizer).seconds;
  const double tokens =
      static_cast<double>(knobs.micro_batch * knobs.accumulation) * static_cast<double>(worst.source + worst.target);
  p.tokens_per_second = p.step_seconds > 0 ? tokens / p.step_seconds : 0.0;
  return p;
}

// ---- Choosing ----

std::string checkpointing_label(std::int64_t checkpointed_layers, std::int64_t layers) {
  if (checkpointed_layers <= 0) return "none";
  if (checkpointed_layers >= layers) return "all";
  return std::to_string(checkpointed_layers) + " of " + std::to_string(layers);
}

namespace {

// The values each knob may take: the fixed one, or every choice that keeps the effective batch.
struct KnobChoices {
  std::vector<std::int64_t> micro_batches;
  std::vector<std::int64_t> checkpointing;
  std::vector<optim::OptimizerType> optimizers;
};

KnobChoices knob_choices(const PlanRequest& request, std::int64_t layers) {
  KnobChoices k;
  if (request.micro_batch) {
    k.micro_batches.push_back(*request.micro_batch);
  } else {
    for (std::int64_t m = request.effective_batch; m >= 1; --m) {
      if (request.effective_batch % m == 0) k.micro_batches.push_back(m);
    }
  }
  if (request.checkpointed_layers) {
    k.checkpointing.push_back(std::min(*request.checkpointed_layers, layers));
  } else {
    k.checkpointing = {0, layers / 2, layers};
    k.checkpointing.erase(std::unique(k.checkpointing.begin(), k.checkpointing.end()), k.checkpointing.end());
    k.checkpointing.erase(
        std::remove_if(k.checkpointing.begin() + 1, k.checkpointing.end(), [](std::int64_t n) { return n == 0; }),
        k.checkpointing.end());
  }
  if (request.optimizer) {
    k.optimizers.push_back(*request.optimizer);
  } else {
    k.optimizers = {optim::OptimizerType::adamw_torch, optim::OptimizerType::adafactor};
  }
  return k;
}

// The fastest candidate that fits; among equally fast ones (within 0.01%), the smallest peak.
std::optional<std::size_t> fastest_fitting(const std::vector<Candidate>& candidates) {
  std::optional<std::size_t> chosen;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const auto& candidate = candidates[i];
    if (!candidate.fits) continue;
    if (!chosen) {
      chosen = i;
      continue;
    }
    const auto& best = candidates[*chosen];
    const bool faster = candidate.prediction.tokens_per_second > best.prediction.tokens_per_second * 1.0001;
    const bool as_fast_smaller = candidate.prediction.tokens_per_second >= best.prediction.tokens_per_second * 0.9999 &&
                                 candidate.prediction.peak < best.prediction.peak;
    if (faster || as_fast_smaller) chosen = i;
  }
  return chosen;
}

std::string describe_knobs(const PlanKnobs& k, std::int64_t layers) {
  std::ostringstream s;
  s << "micro-batch " << k.micro_batch << " x " << k.accumulation << " accumulation, checkpointing "
    << checkpointing_label(k.checkpointed_layers, layers) << ", " << optim::to_string(k.optimizer)
    << (k.bf16 ? ", bf16" : "");
  return s.str();
}

std::string explain_plan(const Plan& plan, const PlanRequest& request, std::int64_t layers) {
  std::ostringstream why;
  const int margin_percent = static_cast<int>(request.margin * 100);
  if (!plan.chosen) {
    why << "no candidate fits in " << util::format_bytes(request.budget) << ": the smallest needs "
        << util::format_bytes(plan.minimum_budget) << " (predicted peak plus a " << margin_percent << "% margin)";
    return why.str();
  }
  const auto& best = plan.candidates[*plan.chosen];
  std::size_t fitting = 0;
  for (const auto& k : plan.candidates) fitting += k.fits ? 1 : 0;
  why << "chose " << describe_knobs(best.knobs, layers) << ": predicted peak "
      << util::format_bytes(best.prediction.peak) << " of " << util::format_bytes(request.budget) << " (with a "
      << margin_percent << "% margin), " << static_cast<long long>(std::llround(best.prediction.tokens_per_second))
      << " tokens/s, the fastest of the " << fitting << " of " << plan.candidates.size() << " candidates that fit";
  const Candidate* fastest = nullptr;
  for (const auto& k : plan.candidates) {
    if (!fastest || k.prediction.tokens_per_second > fastest->prediction.tokens_per_second) fastest = &k;
  }
  if (fastest && !fastest->fits) {
    why << "; the fastest overall (" << describe_knobs(fastest->knobs, layers) << ", "
        << static_cast<long long>(std::llround(fastest->prediction.tokens_per_second)) << " tokens/s) needs "
        << util::format_bytes(static_cast<std::uint64_t>(
               std::ceil(static_cast<double>(fastest->prediction.peak) * (1.0 + request.margin))));
  }
  return why.str();
}

}  // namespace

Plan choose_plan(const Calibration& c, const PlanRequest& request) {
  if (request.effective_batch < 1) throw std::invalid_argument("the effective batch must be at least 1");
  const auto layers = std::max(c.encoder_layers, c.decoder_layers);
  const auto choices = knob_choices(request, layers);
  const BatchShape worst{1, request.source_length, request.target_length};
  Plan plan;
  plan.minimum_budget = std::numeric_limits<std::uint64_t>::max();
  for (const auto m : choices.micro_batches) {
    for (const auto n : choices.checkpointing) {
      for (const auto kind : choices.optimizers) {
        Candidate candidate;
        candidate.knobs.micro_batch = m;
        candidate.knobs.accumulation = request.effective_batch / m;  // the effective batch is kept
        candidate.knobs.checkpointed_layers = n;
        candidate.knobs.optimizer = kind;
        candidate.knobs.bf16 = request.bf16;
        candidate.prediction = predict(c, candidate.knobs, worst);
        const auto needed = static_cast<std::uint64_t>(
            std::ceil(static_cast<double>(candidate.prediction.peak) * (1.0 + request.margin)));
        candidate.fits = needed <= request.budget;
        plan.minimum_budget = std::min(plan.minimum_budget, needed);
        plan.candidates.push_back(candidate);
      }
    }
  }
  plan.chosen = fastest_fitting(plan.candidates);
  plan.explanation = explain_plan(plan, request, layers);
  return plan;
}

}  // namespace fitsum::memory
