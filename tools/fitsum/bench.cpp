// `fitsum bench`: speed on the user's own hardware, printed as one JSON line per run so that scripts can put it
// beside the eager PyTorch baseline (../shared/reference/bench_eager.py prints the same fields).
//   fitsum bench train   training steps of a PEGASUS shape with random init and random tokens, through the same
//                        library calls as `fitsum train` (train/train_step.h): median step time, tokens/s, peak
//                        resident memory (VmHWM) and the exact peak of tensor bytes.
//   fitsum bench matmul  the machine's fp32 matrix-product rate (an n x n x n product), the denominator of MFU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "fitsum/util/torch_compat.h"
// LibTorch 1.13's chrome://tracing recorder; newer LibTorch moved profiling to Kineto.
#define FITSUM_HAS_RECORD_PROFILE !FITSUM_TORCH_AT_LEAST(2, 0)
#if FITSUM_HAS_RECORD_PROFILE
#include <torch/csrc/autograd/profiler_legacy.h>
#endif

#include "commands.h"
#include "fitsum/io/hf_config.h"
#include "fitsum/memory/device_memory.h"
#include "fitsum/memory/host_allocator.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/optim/optimizers.h"
#include "fitsum/train/train_step.h"
#include "fitsum/util/bytes.h"
#include "fitsum/util/device.h"
#include "fitsum/util/threads.h"

namespace fitsum::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const auto n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The process's peak resident set (VmHWM), as bench_eager.py reads it.
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // "VmHWM:  123 kB"
  }
  return -1.0;
}

constexpr double kMiB = 1024.0 * 1024.0;

struct ThreadFlags {
  int num_threads = 0;
  int blas_threads = 0;
  int update_threads = 0;
};

void add_thread_flags(CLI::App& cmd, ThreadFlags& t) {
  const auto defaults = util::default_thread_settings();
  cmd.add_option("--num_threads", t.num_threads,
                 "LibTorch intra-op threads (0: fitsum's default, " + std::to_string(defaults.intra_op) + ")");
  cmd.add_option("--blas_threads", t.blas_threads,
                 "BLAS threads for matrix products (0: fitsum's default, " + std::to_string(defaults.blas) + ")");
  cmd.add_option(
      "--update_threads", t.update_threads,
      "intra-op threads of the optimizer step (0: fitsum's default, " + std::to_string(defaults.update) + ")");
}

util::ThreadSettings apply_threads(const ThreadFlags& t) {
  const auto settings = util::resolve_thread_settings({t.num_threads, t.blas_threads, t.update_threads});
  util::apply_thread_settings(settings);
  return settings;
}

torch::Device bench_device(const std::string& name) { return util::parse_device(name, /*allow_auto=*/false); }

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// ---- fitsum bench train ----

struct BenchTrainOptions {
  std::string shape = "small";
  std::string config_name;
  std::string config_overrides;
  std::int64_t batch = 2;
  std::int64_t src_len = 256;
  std::int64_t tgt_len = 64;
  std::int64_t gradient_accumulation_steps = 1;
  std::string max_memory;
  int steps = 5;
  int warmup = 1;
  std::string optim = "adafactor";
  double learning_rate = 1e-3;
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;
  bool gradient_checkpointing = false;
  bool bf16 = false;
  std::string device = "cpu";
  std::uint64_t seed = 0;
  std::vector<std::string> unfused;  // loss, embedding, optimizer, dropout: the plain paths, for before/after
  std::string profile;               // a chrome://tracing file of one more step
  bool malloc_defaults = false;      // keep glibc's allocator settings (memory/host_allocator.h)
  ThreadFlags threads;
};

void run_bench_train(const BenchTrainOptions& o) {
  if (o.steps < 1 || o.warmup < 0) throw std::invalid_argument("--steps must be at least 1 and --warmup at least 0");
  if (o.batch < 1 || o.src_len < 1 || o.tgt_len < 2) {
    throw std::invalid_argument("--batch and --src_len must be at least 1, --tgt_len at least 2");
  }
  if (o.gradient_accumulation_steps < 1)
    throw std::invalid_argument("--gradient_accumulation_steps must be at least 1");
  const auto threads = apply_threads(o.threads);
  if (!o.malloc_defaults) memory::tune_host_allocator_for_training();
  const auto device = bench_device(o.device);
  memory::start_tracking(device);  // before the model exists: its weights count
  if (!o.max_memory.empty())
    memory::set_memory_limit(device, static_cast<std::int64_t>(util::parse_bytes(o.max_memory)));

  nlohmann::json config_json;
  model::ModelConfig config;
  if (!o.config_name.empty()) {
    config = io::read_model_config(o.config_name);
  } else {
    config = model::pegasus_shape(o.shape);
  }
  if (!o.config_overrides.empty()) {
    auto j = io::model_config_to_hf(config);
    io::apply_config_overrides(j, o.config_overrides);
    config = io::model_config_from_hf(j, "--config_overrides");
  }
  const auto plain = [&o](const char* what) {
    return std::find(o.unfused.begin(), o.unfused.end(), what) != o.unfused.end() ||
           std::find(o.unfused.begin(), o.unfused.end(), "all") != o.unfused.end();
  };
  model::Seq2SeqLM model(config);
  model::init_weights(*model, o.seed);
  model::KernelChoices kernels;
  kernels.in_place_embedding_gradient = !plain("embedding");
  kernels.byte_mask_dropout = !plain("dropout");
  model->set_kernel_choices(kernels);
  model->to(device);
  model->train();
  if (o.gradient_checkpointing) model->set_gradient_checkpointing(config.encoder_layers, config.decoder_layers);

  optim::OptimizerSettings settings;
  settings.type = optim::optimizer_type_from_string(o.optim);
  settings.learning_rate = o.learning_rate;
  settings.weight_decay = o.weight_decay;
  settings.fused = !plain("optimizer");
  auto optimizer = optim::make_optimizer(*model, settings);
  std::vector<torch::Tensor> parameters;
  for (const auto& [name, p] : optim::trainable_parameters(*model)) parameters.push_back(p);

  // Random tokens above the special ids, every position real (as bench_eager.py draws them).
  auto generator = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  const std::int64_t low = std::min<std::int64_t>(103, config.vocab_size - 1);
  auto input_ids = torch::randint(low, config.vocab_size, {o.batch, o.src_len}, generator, torch::kLong).to(device);
  auto attention_mask = torch::ones_like(input_ids);
  auto labels = torch::randint(low, config.vocab_size, {o.batch, o.tgt_len}, generator, torch::kLong).to(device);

  train::MicroBatchOptions micro;
  const auto accumulation = o.gradient_accumulation_steps;
  micro.loss_scale = 1.0 / static_cast<double>(accumulation * o.batch * o.tgt_len);
  micro.bf16 = o.bf16;
  micro.fused_loss = !plain("loss");
  train::UpdateOptions update;
  update.max_grad_norm = o.max_grad_norm;
  update.threads = threads.update;
  torch::manual_seed(o.seed);
  std::vector<double> times, update_times;
  double loss = 0.0;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    if (step == o.warmup) memory::reset_peak_memory(device);
    synchronize(device);
    const auto start = Clock::now();
    double loss_sum = 0.0;
    std::int64_t loss_tokens = 0;
    for (std::int64_t m = 0; m < accumulation; ++m) {  // the same batch each time: speed does not care
      const auto token_loss = train::forward_backward(*model, input_ids, attention_mask, labels, micro);
      loss_sum += token_loss.sum.item<double>();
      loss_tokens += token_loss.tokens;
    }
    loss = loss_sum / static_cast<double>(loss_tokens);
    const auto update_start = Clock::now();
    train::optimizer_step(*optimizer, parameters, update);
    synchronize(device);
    if (step >= o.warmup) {
      times.push_back(seconds_since(start));
      update_times.push_back(seconds_since(update_start));
    }
  }
  const auto memory = memory::read_memory(device);
  if (!o.profile.empty()) {
#if FITSUM_HAS_RECORD_PROFILE
    torch::autograd::profiler::RecordProfile record(o.profile);
    train::forward_backward(*model, input_ids, attention_mask, labels, micro);
    train::optimizer_step(*optimizer, parameters, update);
    synchronize(device);
#else
    std::cerr << "fitsum: warning: --profile needs LibTorch 1.x's recorder; nothing written\n";
#endif
  }
  const double step_s = median(times);
  const auto tokens = static_cast<double>(accumulation * o.batch * (o.src_len + o.tgt_len));
  nlohmann::ordered_json out;
  out["impl"] = "fitsum";
  out["shape"] = o.config_name.empty() ? o.shape : o.config_name;
  out["optim"] = o.optim;
  out["batch"] = o.batch;
  out["src_len"] = o.src_len;
  out["tgt_len"] = o.tgt_len;
  out["gradient_accumulation_steps"] = accumulation;
  out["threads"] = at::get_num_threads();
  out["blas_threads"] = util::blas_threads();
  out["update_threads"] = threads.update;
  out["step_s_median"] = step_s;
  out["step_s_all"] = times;
  out["update_s_median"] = median(update_times);  // clipping, optimizer step and zeroing the gradients
  out["tokens_per_s"] = tokens / step_s;
  out["samples_per_s"] = static_cast<double>(accumulation * o.batch) / step_s;
  out["peak_rss_mib"] = peak_rss_mib();
  out["loss_last"] = loss;
  out["peak_tracked_mib"] = static_cast<double>(memory.peak_bytes) / kMiB;
  if (device.is_cuda()) {
    out["peak_allocated_mib"] = static_cast<double>(memory.peak_bytes) / kMiB;
    out["peak_reserved_mib"] = static_cast<double>(memory.peak_reserved_bytes) / kMiB;
  }
  out["flops_per_step"] =
      static_cast<double>(accumulation) * model::training_matmul_flops(config, o.batch, o.src_len, o.tgt_len);
  out["gradient_checkpointing"] = o.gradient_checkpointing;
  out["bf16"] = o.bf16;
  out["device"] = device.str();
  out["dropout"] = {config.dropout, config.attention_dropout, config.activation_dropout};
  out["unfused"] = o.unfused;
  out["malloc_defaults"] = o.malloc_defaults;
  std::cout << out.dump() << std::endl;
}

// ---- fitsum bench matmul ----

struct BenchMatmulOptions {
  std::int64_t size = 1024;
  double seconds = 1.0;
  std::string device = "cpu";
  ThreadFlags threads;
};

void run_bench_matmul(const BenchMatmulOptions& o) {
  apply_threads(o.threads);
  const auto device = bench_device(o.device);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(0);
  auto a = torch::randn({o.size, o.size}, generator).to(device);
  auto b = torch::randn({o.size, o.size}, generator).to(device);
  auto c = torch::empty({o.size, o.size}, a.options());
  for (int i = 0; i < 3; ++i) torch::mm_out(c, a, b);  // warm the BLAS threads and caches
  synchronize(device);
  std::vector<double> times;
  const auto begin = Clock::now();
  while (times.size() < 5 || seconds_since(begin) < o.seconds) {
    const auto start = Clock::now();
    torch::mm_out(c, a, b);
    synchronize(device);
    times.push_back(seconds_since(start));
  }
  const double n = static_cast<double>(o.size);
  nlohmann::ordered_json out;
  out["impl"] = "fitsum";
  out["benchmark"] = "matmul";
  out["size"] = o.size;
  out["threads"] = at::get_num_threads();
  out["blas_threads"] = util::blas_threads();
  out["blas"] = util::blas_description();
  out["device"] = device.str();
  out["repeats"] = times.size();
  out["gflops"] = 2.0 * n * n * n / median(times) / 1e9;
  std::cout << out.dump() << std::endl;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Measure training speed and memory, or the machine's matmul rate");
  bench->require_subcommand(1);

  auto train = std::make_shared<BenchTrainOptions>();
  auto* t = bench->add_subcommand(
      "train", "Time training steps of a PEGASUS shape (random init, random tokens); prints one JSON line");
  t->add_option("--shape", train->shape, "tiny, small, base or large (pegasus-large)")->capture_default_str();
  t->add_option("--config_name", train->config_name, "a config.json instead of --shape");
  t->add_option("--config_overrides", train->config_overrides, "e.g. \"dropout=0.0,attention_dropout=0.0\"");
  t->add_option("--batch", train->batch, "sequences per step")->capture_default_str();
  t->add_option("--src_len", train->src_len, "source tokens per sequence")->capture_default_str();
  t->add_option("--tgt_len", train->tgt_len, "target tokens per sequence")->capture_default_str();
  t->add_option("--gradient_accumulation_steps", train->gradient_accumulation_steps, "micro-batches per optimizer step")
      ->capture_default_str();
  t->add_option("--max_memory", train->max_memory,
                "cap on tensor memory, e.g. 16GiB (CPU: exact; CUDA: the "
                "caching allocator's fraction)");
  t->add_option("--steps", train->steps, "timed steps (the median is reported)")->capture_default_str();
  t->add_option("--warmup", train->warmup, "untimed steps first")->capture_default_str();
  t->add_option("--optim", train->optim, "adafactor or adamw_torch")->capture_default_str();
  t->add_option("--learning_rate", train->learning_rate, "learning rate")->capture_default_str();
  t->add_option("--weight_decay", train->weight_decay, "weight decay")->capture_default_str();
  t->add_option("--max_grad_norm", train->max_grad_norm, "gradient clipping (0: off)")->capture_default_str();
  t->add_flag("--gradient_checkpointing", train->gradient_checkpointing, "recompute every layer in backward");
  t->add_flag("--bf16", train->bf16, "bfloat16 autocast");
  t->add_option("--device", train->device, "cpu or cuda")->capture_default_str();
  t->add_option("--seed", train->seed, "seed of weights, tokens and dropout")->capture_default_str();
  t->add_option("--unfused", train->unfused,
                "run the plain LibTorch path of: loss, embedding, optimizer, dropout, all (before/after comparisons)")
      ->delimiter(',')
      ->check(CLI::IsMember({"loss", "embedding", "optimizer", "dropout", "all"}));
  t->add_option("--profile", train->profile,
                "after the timed steps, record one more with LibTorch's profiler into this chrome://tracing file "
                "(bench/profile_summary.py sums it up)");
  t->add_flag("--malloc_defaults", train->malloc_defaults,
              "keep the C allocator's default settings (fitsum tunes them for training: memory/host_allocator.h)");
  add_thread_flags(*t, train->threads);
  t->callback([train]() {
    try {
      run_bench_train(*train);
    } catch (const c10::OutOfMemoryError& e) {
      throw std::runtime_error(std::string("out of memory: ") + e.what_without_backtrace());
    }
  });

  auto matmul = std::make_shared<BenchMatmulOptions>();
  auto* m = bench->add_subcommand("matmul", "The fp32 matrix-product rate (n x n x n); prints one JSON line");
  m->add_option("--size", matmul->size, "n")->capture_default_str();
  m->add_option("--seconds", matmul->seconds, "measure for at least this long")->capture_default_str();
  m->add_option("--device", matmul->device, "cpu or cuda")->capture_default_str();
  add_thread_flags(*m, matmul->threads);
  m->callback([matmul]() { run_bench_matmul(*matmul); });
}

}  // namespace fitsum::cli
