// `fitsum bench`: speed on the user's own hardware, printed as one JSON line per run so that scripts can put it
// beside the eager PyTorch baseline (../shared/reference/bench_eager.py prints the same fields).
//   fitsum bench train   training steps of a model shape (--shape or --config_name) with random init and random
//                        tokens, through the same library calls as `fitsum train` (model/micro_step.h and optim/optimizer_step.h): median step
//                        time, tokens/s, peak resident memory (VmHWM) and the exact peak of tensor bytes; with
//                        --lora_r, LoRA adapters on the frozen base (train/lora_setup.h, as fitsum train).
//   fitsum bench matmul  the machine's fp32 matrix-product rate (an n x n x n product) with the products fitsum's
//                        model runs, the denominator of MFU, and with LibTorch's at::mm.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "fitsum/util/torch_compat.h"
// LibTorch 1.13's chrome://tracing recorder; newer LibTorch moved profiling to Kineto.
#define FITSUM_HAS_RECORD_PROFILE !FITSUM_TORCH_AT_LEAST(2, 0)
#if FITSUM_HAS_RECORD_PROFILE
#include <torch/csrc/autograd/profiler_legacy.h>
#endif

#include "bench_records.h"
#include "bench_support.h"
#include "commands.h"
#include "fitsum/families/family.h"
#include "fitsum/io/hf_config.h"
#include "fitsum/kernels/onednn_linear.h"
#include "fitsum/memory/device_memory.h"
#include "fitsum/memory/fit.h"
#include "fitsum/model/micro_step.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/optim/optimizer_step.h"
#include "fitsum/optim/optimizers.h"
#include "fitsum/train/lora_setup.h"
#include "fitsum/train/memory_plan.h"
#include "fitsum/train/optimizer_offload.h"
#include "fitsum/util/bytes.h"
#include "fitsum/util/device_timer.h"
#include "fitsum/util/host_allocator.h"
#include "fitsum/util/python_numbers.h"
#include "fitsum/util/runtime.h"
#include "fitsum/util/threads.h"
#include "hub_flags.h"
#include "lora_flags.h"

namespace fitsum::cli {

namespace {

// ---- fitsum bench train ----

struct BenchTrainOptions {
  std::string shape = "small";
  std::string config_name;
  io::ModelSource hub;  // --revision, --cache_dir, --token of a Hub id given as --config_name
  std::string config_overrides;
  std::int64_t batch = 2;
  std::int64_t src_len = 256;
  std::int64_t tgt_len = 64;
  std::int64_t gradient_accumulation_steps = 1;
  std::string max_memory;
  bool plan = false;  // with --max_memory: the planner chooses micro-batch, checkpointing and optimizer
  std::optional<optim::OffloadDevice> offload = optim::OffloadDevice::none;  // unset: auto, the planner's choice
  std::uint64_t max_host_memory = 0;                                         // 0: no check
  int steps = 5;
  int warmup = 1;
  std::string optim = "adafactor";
  double learning_rate = 1e-3;
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;
  bool gradient_checkpointing = false;
  std::optional<std::int64_t> checkpointed_encoder_layers;  // with --gradient_checkpointing: the bottom N only
  std::optional<std::int64_t> checkpointed_decoder_layers;
  bool bf16 = false;
  std::string device = "cpu";
  std::uint64_t seed = 0;
  std::vector<std::string>
      unfused;  // loss, embedding, optimizer, ..., attention_dropout: the plain paths, for before/after
  model::LoraConfig lora;  // --lora_r > 0: adapters on a frozen base, as fitsum train sets them up
  std::string base_dtype = "float32";
  std::string profile;           // a chrome://tracing file of one more step
  BenchRecordOptions records;    // CUDA: the allocator's history, a Kineto trace (bench_records.h)
  bool malloc_defaults = false;  // keep glibc's allocator settings (util/host_allocator.h)
  ThreadFlags threads;
};

bool unfused(const BenchTrainOptions& o, const char* what) {
  return std::find(o.unfused.begin(), o.unfused.end(), what) != o.unfused.end() ||
         std::find(o.unfused.begin(), o.unfused.end(), "all") != o.unfused.end();
}

// The sizes a benchmark takes: past them no shape fits a machine, and their products stay within 64 bits.
constexpr std::int64_t kMaxBenchSize = std::int64_t{1} << 24;

void check_finite(double value, const char* flag) {
  if (!(value >= 0 && std::isfinite(value))) {
    throw std::invalid_argument(std::string(flag) + " must be a finite number, not negative, got " +
                                util::exact_decimal(value));
  }
}

// The benchmark's settings as TrainingArguments carries them (the LoRA ones checked as fitsum train checks them).
// With --plan the optimizer is left unset, so that the planner chooses it (as fitsum train's optim auto).
train::TrainingArguments bench_arguments(const BenchTrainOptions& o) {
  train::TrainingArguments args;
  args.per_device_train_batch_size = o.batch;
  args.gradient_accumulation_steps = o.gradient_accumulation_steps;
  const auto optimizer = optim::parse_optimizer_type(o.optim, "--optim");
  if (!o.plan) args.optim = optimizer;
  args.gradient_checkpointing = o.gradient_checkpointing;
  args.gradient_checkpointing_encoder_layers = o.checkpointed_encoder_layers;
  args.gradient_checkpointing_decoder_layers = o.checkpointed_decoder_layers;
  args.bf16 = o.bf16;
  args.offload_optimizer = o.offload;
  args.max_host_memory = o.max_host_memory;
  args.lora = o.lora;
  args.base_dtype = o.base_dtype;
  args.seed = static_cast<std::int64_t>(o.seed);
  args.validate_lora();
  return args;
}

void check_bench_options(const BenchTrainOptions& o) {
  check_range(o.steps, 1, 1000000, "--steps");
  check_range(o.warmup, 0, 1000000, "--warmup");
  check_range(o.batch, 1, kMaxBenchSize, "--batch");
  check_range(o.src_len, 1, kMaxBenchSize, "--src_len");
  check_range(o.tgt_len, 2, kMaxBenchSize, "--tgt_len");
  check_range(o.gradient_accumulation_steps, 1, kMaxBenchSize, "--gradient_accumulation_steps");
  check_range(o.batch * o.gradient_accumulation_steps, 1, kMaxBenchSize, "--batch x --gradient_accumulation_steps");
  check_finite(o.learning_rate, "--learning_rate");
  check_finite(o.weight_decay, "--weight_decay");
  if (!(o.max_grad_norm >= 0)) throw std::invalid_argument("--max_grad_norm must not be negative (0: off)");
  for (const auto& [flag, layers] :
       {std::pair{"--gradient_checkpointing_encoder_layers", o.checkpointed_encoder_layers},
        std::pair{"--gradient_checkpointing_decoder_layers", o.checkpointed_decoder_layers}}) {
    if (layers) check_range(*layers, 0, kMaxBenchSize, flag);
  }
  if (o.plan && o.max_memory.empty()) throw std::invalid_argument("--plan needs --max_memory");
  bench_arguments(o);
  check_bench_records(o.records, o.device);
  if (!FITSUM_HAS_RECORD_PROFILE && !o.profile.empty()) {
    throw std::invalid_argument("--profile needs LibTorch 1.x's recorder; this build has LibTorch " +
                                std::string(TORCH_VERSION));
  }
}

// The --profile file, opened before anything runs: a folder gets fitsum_bench_train.json inside it (as
// torch.profiler's trace handlers write into a folder); a path that cannot be written is a usage error now rather
// than LibTorch's stack trace after the run.
std::string open_profile(const std::string& flag_value, std::ofstream& stream) {
  std::error_code error;
  const bool folder = std::filesystem::is_directory(flag_value, error);
  const std::string path =
      folder ? (std::filesystem::path(flag_value) / "fitsum_bench_train.json").string() : flag_value;
  stream.open(path, std::ios::out | std::ios::trunc);
  if (!stream) {
    throw std::invalid_argument("--profile '" + flag_value + "': cannot write '" + path + "' (" + std::strerror(errno) +
                                "); give a file, e.g. --profile profile.json, or a folder");
  }
  return path;
}

// --shape: a PEGASUS size (model::pegasus_shape) or a released architecture a family names (pegasus-x-base, ...).
model::ModelConfig shape_config(const std::string& shape) {
  if (const auto* named = families::find_shape(shape)) {
    return io::model_config_from_hf(nlohmann::json::parse(named->config_json), "--shape " + shape);
  }
  try {
    return model::pegasus_shape(shape);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("--shape '" + shape + "' is not a shape; choose tiny, small, base, large, " +
                                families::shape_names() + ", or give --config_name");
  }
}

model::Seq2SeqLM bench_model(const BenchTrainOptions& o, const torch::Device& device) {
  auto config = o.config_name.empty()
                    ? shape_config(o.shape)
                    : io::read_model_config(io::resolve_model_folder(o.config_name, {}, hub_options(o.hub)));
  if (!o.config_overrides.empty()) {
    auto j = io::model_config_to_hf(config);
    io::apply_config_overrides(j, o.config_overrides);
    config = io::model_config_from_hf(j, "--config_overrides");
  }
  model::Seq2SeqLM model(config);
  model::init_weights(*model, o.seed);
  model::KernelChoices kernels;
  kernels.in_place_embedding_gradient = !unfused(o, "embedding");
  kernels.byte_mask_dropout = !unfused(o, "dropout");
  kernels.fused_rms_norm = !unfused(o, "rms_norm");
  kernels.recomputed_feed_forward = !unfused(o, "feed_forward");
  kernels.recomputed_attention_dropout = !unfused(o, "attention_dropout");
  model->set_kernel_choices(kernels);
  if (o.lora.enabled()) {
    auto args = bench_arguments(o);
    std::cerr << "fitsum: " << train::prepare_lora(*model, args) << "\n";
  }
  model->to(device);
  model->train();
  return model;
}

// The knobs the benchmark runs: as given, or (with --max_memory) checked by the planner against the budget, which
// with --plan also chooses them, through the path of fitsum train --max_memory (train/memory_plan.h). The budget
// then becomes a hard limit.
memory::PlanKnobs bench_knobs(const BenchTrainOptions& o, model::Seq2SeqLMImpl& model, const util::Runtime& runtime,
                              std::optional<memory::Candidate>& planned) {
  const auto& config = model.config();
  if (!o.max_memory.empty()) {
    train::BudgetPlanOptions plan;
    plan.budget = memory::resolve_memory_budget(o.max_memory, runtime.device);
    plan.worst = {1, o.src_len, o.tgt_len};
    plan.fixed.micro_batch = plan.fixed.optimizer = plan.fixed.checkpointing = !o.plan;
    auto args = bench_arguments(o);
    train::Report report;
    report.warning = [](const std::string& line) { std::cerr << "fitsum: warning: " << line << "\n"; };
    const auto fit = train::plan_and_apply(model, args, plan, runtime, report);
    std::cerr << "fitsum: memory plan: " << fit.explanation << "\n";
    planned = fit.chosen;
    return fit.chosen->knobs;
  }
  memory::PlanKnobs knobs;
  knobs.micro_batch = o.batch;
  knobs.accumulation = o.gradient_accumulation_steps;
  knobs.encoder_checkpointed =
      o.gradient_checkpointing ? o.checkpointed_encoder_layers.value_or(config.encoder_layers) : 0;
  knobs.decoder_checkpointed =
      o.gradient_checkpointing ? o.checkpointed_decoder_layers.value_or(config.decoder_layers) : 0;
  knobs.optimizer = optim::parse_optimizer_type(o.optim, "--optim");
  knobs.bf16 = o.bf16;
  knobs.offload_optimizer = o.offload == optim::OffloadDevice::cpu;
  return knobs;
}

struct BenchBatch {
  torch::Tensor input_ids, attention_mask, labels;
};

// Random tokens above the special ids, every position real (as bench_eager.py draws them).
BenchBatch random_batch(const BenchTrainOptions& o, std::int64_t batch, std::int64_t vocab,
                        const torch::Device& device) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  const std::int64_t low = std::min<std::int64_t>(103, vocab - 1);
  BenchBatch b;
  b.input_ids = torch::randint(low, vocab, {batch, o.src_len}, generator, torch::kLong).to(device);
  b.attention_mask = torch::ones_like(b.input_ids);
  b.labels = torch::randint(low, vocab, {batch, o.tgt_len}, generator, torch::kLong).to(device);
  return b;
}

struct StepTimes {
  std::vector<double> step, update;
  double loss = 0.0;
  double first_step_s = 0.0;  // process start to the end of the first optimizer step
};

// Warm-up steps, then the timed ones (and one more under the profiler with --profile): accumulation micro-steps on
// the same batch (speed does not care), then the optimizer step, exactly as the trainer runs them.
// --record_allocator's `history` ends with the timed steps; --record_profile adds two short steps (bench_records.h).
StepTimes timed_steps(const BenchTrainOptions& o, model::Seq2SeqLMImpl& model, torch::optim::Optimizer& optimizer,
                      const memory::PlanKnobs& knobs, const util::Runtime& runtime, std::ostream* profile_out,
                      train::OptimizerOffload* offload, memory::AllocatorHistory* history) {
  const auto& device = runtime.device;
  const auto batch = random_batch(o, knobs.micro_batch, model.config().vocab_size, device);
  std::vector<torch::Tensor> parameters;
  for (const auto& [name, p] : optim::trainable_parameters(model)) parameters.push_back(p);
  model::MicroBatchOptions micro;
  micro.loss_scale = 1.0 / static_cast<double>(knobs.accumulation * knobs.micro_batch * o.tgt_len);
  micro.bf16 = knobs.bf16;
  micro.fused_loss = !unfused(o, "loss");
  optim::UpdateOptions update;
  update.max_grad_norm = o.max_grad_norm;
  update.threads = runtime.threads.update;
  // What the trainer knows of its batches on the host (train/device_batch.h): every label position is real and
  // every id was drawn in the vocabulary, so the micro-steps read nothing back from the device, as training's.
  kernels::KnownLabels known;
  known.rows = torch::arange(batch.labels.numel(), torch::TensorOptions(torch::kLong).device(device));
  known.ids_checked = true;
  known.bias_nonzero = kernels::bias_has_nonzero(model.final_logits_bias);
  micro.known = &known;
  torch::manual_seed(o.seed);
  StepTimes t;
  torch::Tensor last_loss_sum;
  util::DeviceTimer step_timer(device), update_timer(device);  // CUDA events, or the host clock
  const bool profile = FITSUM_HAS_RECORD_PROFILE && profile_out != nullptr;
  const int kineto_from = o.warmup + o.steps + (profile ? 1 : 0);
  const int kineto_steps = o.records.profile.empty() ? 0 : BenchRecordOptions::kProfiledSteps;
  std::optional<util::ProfilerTrace> kineto;
  for (int step = 0; step < kineto_from + kineto_steps; ++step) {
    if (step == o.warmup) memory::reset_peak_memory(device);
    if (step == kineto_from && history) history->finish();  // the snapshot at the end of the timed steps
    if (step == kineto_from) kineto.emplace(device);
    const bool profiled = step >= o.warmup + o.steps;  // untimed: --profile's step, --record_profile's
#if FITSUM_HAS_RECORD_PROFILE
    std::optional<torch::autograd::profiler::RecordProfile> record;
    if (step == o.warmup + o.steps) record.emplace(*profile_out);
#endif
    step_timer.start();
    auto loss_sum = torch::zeros({}, torch::TensorOptions(torch::kDouble).device(device));
    const auto micro_steps =
        kineto ? std::min(BenchRecordOptions::kProfiledMicroSteps, knobs.accumulation) : knobs.accumulation;
    for (std::int64_t m = 0; m < micro_steps; ++m) {
      const auto token_loss =
          model::forward_backward(model, batch.input_ids, batch.attention_mask, batch.labels, micro);
      loss_sum.add_(token_loss.sum.to(torch::kDouble));  // read once, after the timed steps
      if (history) history->between_steps();
    }
    if (!kineto) last_loss_sum = loss_sum;  // --record_profile's steps run fewer micro-steps
    update_timer.start();
    offload ? offload->step(optimizer, update) : optim::optimizer_step(optimizer, parameters, update);
    const double update_seconds = update_timer.seconds();  // waits for the step's end
    const double step_seconds = step_timer.seconds();
    if (step == 0) t.first_step_s = seconds_since_process_start();
    if (step >= o.warmup && !profiled) {
      t.step.push_back(step_seconds);
      t.update.push_back(update_seconds);
    }
  }
  if (history) history->finish();
  if (kineto) kineto->save(o.records.profile);
  const auto loss_tokens = static_cast<double>(knobs.accumulation * known.rows.numel());
  if (last_loss_sum.defined()) t.loss = last_loss_sum.item<double>() / loss_tokens;
  return t;
}

nlohmann::ordered_json bench_json(const BenchTrainOptions& o, const model::ModelConfig& config,
                                  const memory::PlanKnobs& knobs, const util::Runtime& runtime, const StepTimes& t) {
  const auto memory = memory::read_memory(runtime.device);
  const double step_s = median(t.step);
  const auto examples = knobs.accumulation * knobs.micro_batch;
  nlohmann::ordered_json out;
  out["impl"] = "fitsum";
  out["shape"] = o.config_name.empty() ? o.shape : o.config_name;
  out["optim"] = optim::to_string(knobs.optimizer);
  out["batch"] = knobs.micro_batch;
  out["src_len"] = o.src_len;
  out["tgt_len"] = o.tgt_len;
  out["gradient_accumulation_steps"] = knobs.accumulation;
  out["threads"] = at::get_num_threads();
  out["blas_threads"] = util::blas_threads();
  out["update_threads"] = runtime.threads.update;
  out["step_s_median"] = step_s;
  out["step_s_all"] = t.step;
  out["first_step_s"] = t.first_step_s;
  out["update_s_median"] = median(t.update);  // clipping, optimizer step and zeroing the gradients
  out["tokens_per_s"] = static_cast<double>(examples * (o.src_len + o.tgt_len)) / step_s;
  out["samples_per_s"] = static_cast<double>(examples) / step_s;
  out["peak_rss_mib"] = peak_rss_mib();
  out["host_allocator"] = util::host_allocator_description();
  out["loss_last"] = t.loss;
  out["peak_tracked_mib"] = static_cast<double>(memory.peak_bytes) / kMiB;
  if (runtime.device.is_cuda()) {
    out["peak_allocated_mib"] = static_cast<double>(memory.peak_bytes) / kMiB;
    out["peak_reserved_mib"] = static_cast<double>(memory.peak_reserved_bytes) / kMiB;
  }
  out["flops_per_step"] = static_cast<double>(knobs.accumulation) *
                          model::training_matmul_flops(config, knobs.micro_batch, o.src_len, o.tgt_len);
  // What checkpointing adds: the checkpointed layers' forward products, run again in backward (MFU's numerator
  // counts them: hardware FLOPs).
  const auto layer = model::forward_matmul_flops(config, knobs.micro_batch, o.src_len, o.tgt_len);
  out["recompute_flops_per_step"] =
      static_cast<double>(knobs.accumulation) * (static_cast<double>(knobs.encoder_checkpointed) * layer.encoder_layer +
                                                 static_cast<double>(knobs.decoder_checkpointed) * layer.decoder_layer);
  out["gradient_checkpointing"] = knobs.checkpointing();
  out["gradient_checkpointing_encoder_layers"] = knobs.encoder_checkpointed;
  out["gradient_checkpointing_decoder_layers"] = knobs.decoder_checkpointed;
  out["bf16"] = knobs.bf16;
  out["lora_r"] = o.lora.r;
  out["base_dtype"] = o.base_dtype;
  out["device"] = runtime.device.str();
  out["dropout"] = {config.dropout, config.attention_dropout, config.activation_dropout};
  out["unfused"] = o.unfused;
  out["malloc_defaults"] = o.malloc_defaults;
  return out;
}

void run_bench_train(const BenchTrainOptions& o) {
  check_bench_options(o);
  std::ofstream profile_stream;
  const auto profile_path = o.profile.empty() ? std::string() : open_profile(o.profile, profile_stream);
  const auto runtime = setup_bench_runtime(o.threads, o.device, !o.malloc_defaults);
  memory::start_tracking(runtime.device);  // before the model exists: its weights count
  const auto history = start_allocator_history(o.records, o.max_memory, runtime.device);  // before the model
  auto model = bench_model(o, runtime.device);
  std::optional<memory::Candidate> planned;
  const auto knobs = bench_knobs(o, *model, runtime, planned);
  model->set_gradient_checkpointing(knobs.encoder_checkpointed, knobs.decoder_checkpointed);
  optim::OptimizerSettings settings;
  settings.type = knobs.optimizer;
  settings.learning_rate = o.learning_rate;
  settings.weight_decay = o.weight_decay;
  settings.fused = !unfused(o, "optimizer");
  auto offload = knobs.offload_optimizer
                     ? std::make_unique<train::OptimizerOffload>(optim::trainable_parameters(*model), runtime.device,
                                                                 knobs.optimizer, o.max_host_memory)
                     : nullptr;
  auto optimizer = optim::make_optimizer(*model, settings, {}, offload ? &offload->host_parameters() : nullptr);
  const auto times = timed_steps(o, *model, *optimizer, knobs, runtime, o.profile.empty() ? nullptr : &profile_stream,
                                 offload.get(), history.get());
  if (!profile_path.empty()) {
    profile_stream.close();
    if (!profile_stream) throw std::runtime_error("--profile: writing '" + profile_path + "' failed");
    std::cerr << "fitsum: wrote the profile of one step to " << profile_path << "\n";
  }
  auto out = bench_json(o, model->config(), knobs, runtime, times);
  out["offload_optimizer"] = offload ? "cpu" : "none";
  if (offload) out["peak_host_mib"] = static_cast<double>(offload->peak_host_bytes()) / kMiB;
  if (planned) out["predicted_peak_mib"] = static_cast<double>(planned->prediction.peak) / kMiB;
  if (planned && planned->cuda) {  // on CUDA: the allocator model's prediction, beside the measured peaks
    out["predicted_allocated_mib"] = static_cast<double>(planned->cuda->allocated) / kMiB;
    out["predicted_reserved_mib"] = static_cast<double>(planned->cuda->reserved) / kMiB;
  }
  std::cout << out.dump() << std::endl;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Measure training speed and memory, or the machine's matmul rate");
  bench->require_subcommand(1);

  auto train = std::make_shared<BenchTrainOptions>();
  auto* t = bench->add_subcommand(
      "train", "Time training steps of a model shape (random init, random tokens); prints one JSON line");
  t->add_option("--shape", train->shape,
                "tiny, small, base or large (pegasus-large), or a released long-input architecture: " +
                    families::shape_names())
      ->capture_default_str();
  t->add_option("--config_name", train->config_name, "a config.json (or a Hub id's) instead of --shape");
  add_hub_flags(*t, train->hub);
  t->add_option("--config_overrides", train->config_overrides, "e.g. \"dropout=0.0,attention_dropout=0.0\"");
  t->add_option("--batch", train->batch, "sequences per step")->capture_default_str();
  t->add_option("--src_len", train->src_len, "source tokens per sequence")->capture_default_str();
  t->add_option("--tgt_len", train->tgt_len, "target tokens per sequence")->capture_default_str();
  t->add_option("--gradient_accumulation_steps", train->gradient_accumulation_steps, "micro-batches per optimizer step")
      ->capture_default_str();
  t->add_option("--max_memory", train->max_memory,
                "memory budget, e.g. 16GiB: the planner checks the configuration against it (predicted peak in the "
                "output), then it is a hard cap (CPU: exact; CUDA: the caching allocator's fraction)");
  t->add_flag("--plan", train->plan,
              "with --max_memory: let the planner choose micro-batch (keeping --batch x "
              "--gradient_accumulation_steps), checkpointing and optimizer, then measure its choice");
  t->add_option_function<std::string>(
      "--offload_optimizer", [train](const std::string& s) { train->offload = train::parse_offload_optimizer(s); },
      "none, cpu (optimizer state and update on the host) or auto (with --plan: the planner's choice)");
  t->add_option_function<std::string>(
      "--max_host_memory", [train](const std::string& s) { train->max_host_memory = util::parse_bytes(s); },
      "with --offload_optimizer: the host memory it may use, e.g. 32GiB");
  t->add_option("--steps", train->steps, "timed steps (the median is reported)")->capture_default_str();
  t->add_option("--warmup", train->warmup, "untimed steps first")->capture_default_str();
  t->add_option("--optim", train->optim, "adafactor or adamw_torch")->capture_default_str();
  t->add_option("--learning_rate", train->learning_rate, "learning rate")->capture_default_str();
  t->add_option("--weight_decay", train->weight_decay, "weight decay")->capture_default_str();
  t->add_option("--max_grad_norm", train->max_grad_norm, "gradient clipping (0: off)")->capture_default_str();
  t->add_flag("--gradient_checkpointing", train->gradient_checkpointing, "recompute every layer in backward");
  t->add_option("--gradient_checkpointing_encoder_layers", train->checkpointed_encoder_layers,
                "with --gradient_checkpointing: only the bottom N encoder layers");
  t->add_option("--gradient_checkpointing_decoder_layers", train->checkpointed_decoder_layers,
                "with --gradient_checkpointing: only the bottom N decoder layers");
  t->add_flag("--bf16", train->bf16, "bfloat16 autocast");
  t->add_option("--device", train->device, "cpu or cuda")->capture_default_str();
  t->add_option("--seed", train->seed, "seed of weights, tokens and dropout")->capture_default_str();
  t->add_option("--unfused", train->unfused,
                "run the plain LibTorch path of: loss, embedding, optimizer, dropout, rms_norm (T5), feed_forward, "
                "attention_dropout (PEGASUS-X), all (before/after comparisons)")
      ->delimiter(',')
      ->check(CLI::IsMember(
          {"loss", "embedding", "optimizer", "dropout", "rms_norm", "feed_forward", "attention_dropout", "all"}));
  t->add_option("--profile", train->profile,
                "after the timed steps, record one more with LibTorch's profiler into this chrome://tracing file "
                "(bench/profile_summary.py sums it up)");
  t->add_flag("--malloc_defaults", train->malloc_defaults,
              "keep glibc malloc's default settings (fitsum tunes them for training where TCMalloc is not the "
              "allocator: util/host_allocator.h)");
  add_bench_record_flags(*t, train->records);
  add_lora_flags(*t, train->lora, train->base_dtype, nullptr);
  add_thread_flags(*t, train->threads);
  t->callback([train]() {
    try {
      run_bench_train(*train);
    } catch (const c10::OutOfMemoryError& e) {
      throw std::runtime_error(std::string("out of memory: ") + e.what_without_backtrace());
    }
  });

  add_bench_matmul_command(*bench);
  add_bench_allocator_command(*bench);
}

}  // namespace fitsum::cli
