// `fitsum train`: fine-tune a model with Hugging Face's TrainingArguments names (flags and/or a JSON file), print
// the resolved configuration, train with a live progress line on a terminal (plain log lines otherwise), and leave
// an HF-loadable model folder plus trainer_state.json in --output_dir. SIGINT / SIGTERM save a checkpoint of the
// last completed step and exit with 130 / 143.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <torch/torch.h>

#include "commands.h"
#include "data_flags.h"
#include "fitsum/generate/options.h"
#include "fitsum/memory/device_memory.h"
#include "fitsum/memory/host_allocator.h"
#include "fitsum/memory/planner.h"
#include "fitsum/memory/static_memory.h"
#include "fitsum/tokenizer/pegasus_tokenizer.h"
#include "fitsum/train/trainer.h"
#include "fitsum/util/bytes.h"
#include "fitsum/util/files.h"
#include "fitsum/util/threads.h"
#include "memory_report.h"
#include "planning.h"
#include "train_flags.h"

namespace fitsum::cli {

namespace {

namespace fs = std::filesystem;

void on_stop_signal(int signal_number) { train::request_stop(signal_number); }

bool holds_a_run(const fs::path& dir) {
  if (!fs::exists(dir)) return false;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name == "model.safetensors" || name == "trainer_state.json" || name.rfind("checkpoint-", 0) == 0) return true;
  }
  return false;
}

std::vector<data::Example> read_split(const std::string& file, const tokenizer::PegasusTokenizer* tokenizer,
                                      std::int64_t vocab_size, const data::DataOptions& options,
                                      std::optional<std::int64_t> max_samples, bool keep_empty, const char* what) {
  data::ReadStats stats;
  auto examples = data::read_examples(file, tokenizer, vocab_size, options, max_samples, &stats);
  std::printf("  %-28s %s: %s\n", what, file.c_str(), stats.summary(options).c_str());
  if (!keep_empty) {
    const auto dropped = data::drop_empty_examples(examples);
    if (dropped > 0) {
      std::printf("  %-28s dropped %zu examples with an empty text or summary (--keep_empty_examples keeps them)\n", "",
                  dropped);
    }
  }
  return examples;
}

void print_configuration(const TrainCommandOptions& o, const io::LoadedModel& loaded, const torch::Device& device,
                         std::size_t train_examples, std::size_t eval_examples) {
  std::printf("resolved configuration\n");
  std::printf("  %-28s %s\n", "model", loaded.description.c_str());
  std::printf("  %-28s %s\n", "tokenizer",
              loaded.tokenizer_dir.empty() ? "(none: pre-tokenized data only)" : loaded.tokenizer_dir.c_str());
  std::printf("  %-28s %s, %d intra-op threads, %d BLAS threads (%s)\n", "device", device.str().c_str(),
              at::get_num_threads(), util::blas_threads(), util::blas_description().c_str());
  std::printf("  %-28s %zu train, %zu eval\n", "examples", train_examples, eval_examples);
  std::printf("  %-28s %lld / %lld tokens\n", "max_source/target_length",
              static_cast<long long>(o.data.max_source_length), static_cast<long long>(o.data.max_target_length));
  const auto arguments = o.training.to_json();
  for (const auto& item : arguments.items()) {
    std::printf("  %-28s %s\n", item.key().c_str(),
                item.value().is_string() ? item.value().get<std::string>().c_str() : item.value().dump().c_str());
  }
  std::fflush(stdout);
}

// --max_memory: calibrates the model, chooses the fastest plan that fits and applies it to `args`, or fails fast
// naming the budget the user's settings need and a plan that fits. Returns the predicted peak of the chosen plan.
std::int64_t plan_for_budget(TrainCommandOptions& o, const CLI::App& command, model::Seq2SeqLMImpl& model,
                             const std::vector<data::Example>& examples, const torch::Device& device,
                             std::uint64_t budget, memory::Plan& plan_out, std::int64_t& layers_out) {
  const auto worst = worst_batch_shape(examples, o.data);
  memory::CalibrationOptions calibration_options;
  calibration_options.max_source_length = worst.source;
  calibration_options.max_target_length = worst.target;
  calibration_options.bf16 = o.training.bf16;
  calibration_options.label_smoothing = o.training.label_smoothing_factor;
  auto request = make_plan_request(command, o, worst, budget);
  if (device.is_cuda()) {
    // The budget is the caching allocator's memory fraction: it caps reserved bytes (docs/memory.md).
    budget_reserved_bytes(request,
                          cuda_planning(model, memory::parse_cuda_alloc_conf(o.cuda_alloc_conf), device, worst));
  }
  if (request.optimizer) {
    // Fail in seconds, before the probe, when weights, gradients and the chosen optimizer's state alone exceed
    // the budget (the seed's story: AdamW's 16 bytes per parameter on a device that holds less).
    const auto counts = model::count_parameters(model.config());
    const auto fixed = memory::static_training_memory(counts, *request.optimizer, memory::StorageDtype::fp32);
    if (static_cast<double>(fixed.total()) * (1.0 + request.margin) > static_cast<double>(budget)) {
      const auto other = *request.optimizer == memory::OptimizerKind::adamw ? memory::OptimizerKind::adafactor
                                                                            : memory::OptimizerKind::adamw;
      const auto alternative = memory::static_training_memory(counts, other, memory::StorageDtype::fp32);
      std::string message =
          "--max_memory " + util::format_bytes(budget) + " is too small for --optim " + o.training.optim +
          ": its weights, gradients and optimizer state alone need " + util::format_bytes(fixed.total()) + " (" +
          util::format_bytes(fixed.weights) + " + " + util::format_bytes(fixed.gradients) + " + " +
          util::format_bytes(fixed.optimizer_state) + "), at least " +
          util::format_bytes(static_cast<std::uint64_t>(static_cast<double>(fixed.total()) * (1.0 + request.margin))) +
          " with the planner's margin, before any activation.";
      if (static_cast<double>(alternative.total()) * (1.0 + request.margin) < static_cast<double>(budget)) {
        message += " A plan that fits starts from --optim " +
                   std::string(memory::to_string(other) == std::string("adamw") ? "adamw_torch" : "adafactor") + " (" +
                   util::format_bytes(alternative.total()) +
                   " before activations); leave --optim unset (or --optim auto) and the planner chooses micro-batch "
                   "and checkpointing too, or run `fitsum plan` with these flags for the table.";
      }
      throw std::invalid_argument(message);
    }
  }
  model.to(device);
  const auto calibration = memory::calibrate(model, calibration_options);
  const auto layers = std::max(calibration.encoder_layers, calibration.decoder_layers);
  const auto plan = memory::choose_plan(calibration, request);
  std::printf("memory plan (worst batch %lld source x %lld target tokens, probe %.1f s)\n%s",
              static_cast<long long>(worst.source), static_cast<long long>(worst.target), calibration.probe_seconds,
              plan_table(plan, calibration, budget).c_str());
  std::fflush(stdout);
  if (!plan.chosen) {
    // What the user fixed cannot fit: name what it needs and a plan with the planner's choices that does.
    auto relaxed = request;
    relaxed.optimizer.reset();
    relaxed.checkpointed_layers.reset();
    relaxed.micro_batch.reset();
    const auto alternative = memory::choose_plan(calibration, relaxed);
    std::string message =
        "--max_memory " + util::format_bytes(budget) + " is too small for these settings: " + plan.explanation;
    if (alternative.chosen) {
      message += ". A plan that fits: " + plan_flags(alternative.candidates[*alternative.chosen], layers) +
                 " (predicted peak " + util::format_bytes(alternative.candidates[*alternative.chosen].prediction.peak) +
                 "); leave --optim / --gradient_checkpointing unset (or --optim auto) to let the planner choose";
    } else {
      message += ". Even micro-batch 1 with full checkpointing and adafactor needs " +
                 util::format_bytes(alternative.minimum_budget);
    }
    throw std::invalid_argument(message);
  }
  plan_out = plan;
  layers_out = layers;
  const auto& chosen = plan.candidates[*plan.chosen];
  apply_plan(o.training, chosen, layers);
  std::printf("memory plan: %s\n  flags: %s\n", plan.explanation.c_str(), plan_flags(chosen, layers).c_str());
  std::fflush(stdout);
  return static_cast<std::int64_t>(chosen.prediction.peak);
}

void run_train(TrainCommandOptions o, const CLI::App& command) {
  auto& args = o.training;
  args.group_by_length = args.group_by_length || o.data.group_by_length;
  const bool planned = !o.max_memory.empty();
  if (args.optim == "auto") {
    if (!planned) throw std::invalid_argument("--optim auto needs --max_memory (the planner chooses the optimizer)");
    args.optim = "adamw_torch";  // a placeholder until the plan is applied
  }
  args.validate();
  if (o.train_file.empty()) throw std::invalid_argument("--train_file is required");
  if (holds_a_run(args.output_dir) && !args.overwrite_output_dir && args.resume_from_checkpoint.empty()) {
    throw std::invalid_argument("--output_dir '" + args.output_dir +
                                "' already holds a training run; pass --overwrite_output_dir to write over it or "
                                "--resume_from_checkpoint latest to continue it");
  }
  const auto threads = util::resolve_thread_settings({o.num_threads, o.blas_threads, 0});
  util::apply_thread_settings(threads);
  memory::tune_host_allocator_for_training();
  // LibTorch's caching allocator reads this once, when CUDA initialises: before anything touches the device.
  memory::apply_cuda_alloc_conf(o.cuda_alloc_conf);
  const auto device = resolve_device(o.device);
  if (device.is_cpu()) {
    const double gflops = util::quick_matmul_gflops();
    if (gflops < 20.0) {
      std::cerr << "fitsum: warning: matrix products run at " << static_cast<int>(gflops) << " GFLOP/s on this CPU ("
                << util::blas_description() << "): LibTorch may be using Debian's reference BLAS; "
                << "apt-get install libopenblas0-pthread makes them ~35x faster\n";
    }
  }
  std::uint64_t budget = 0;
  if (planned) {
    // Counted from here, so the budget covers the weights too.
    memory::start_tracking(device);
    budget = memory::resolve_memory_budget(o.max_memory, device);
  }

  auto loaded = io::load_model(o.model, static_cast<std::uint64_t>(args.seed));
  const auto& config = loaded.model->config();
  for (const auto& warning : data::clamp_lengths_to_model(o.data, config.max_position_embeddings)) {
    std::cerr << "fitsum: warning: " << warning << "\n";
  }
  o.data.validate();
  std::shared_ptr<const tokenizer::PegasusTokenizer> tokenizer;
  if (!loaded.tokenizer_dir.empty()) {
    tokenizer =
        std::make_shared<tokenizer::PegasusTokenizer>(tokenizer::PegasusTokenizer::from_folder(loaded.tokenizer_dir));
  }
  const auto* tok = tokenizer.get();

  std::printf("data\n");
  train::TrainerInputs inputs;
  inputs.train_examples = read_split(o.train_file, tok, config.vocab_size, o.data, o.data.max_train_samples,
                                     o.keep_empty_examples, "train_file");
  if (!o.validation_file.empty() && args.evaluation() != train::IntervalStrategy::no) {
    inputs.eval_examples =
        read_split(o.validation_file, tok, config.vocab_size, o.data, o.data.max_eval_samples, true, "validation_file");
  } else if (args.evaluation() != train::IntervalStrategy::no) {
    throw std::invalid_argument("--eval_strategy " + args.eval_strategy + " needs --validation_file");
  }
  inputs.model = loaded.model;
  inputs.config_json = loaded.config_json;
  inputs.tokenizer_dir = loaded.tokenizer_dir;
  inputs.collator.pad_token_id = config.pad_token_id;
  inputs.collator.pad_to_multiple_of = o.data.pad_to_multiple_of;
  inputs.device = device;
  inputs.tokenizer = tokenizer;
  const fs::path generation_file = fs::path(o.model.model_name_or_path) / "generation_config.json";
  inputs.generation = generate::generation_options_from_hf(
      loaded.config_json,
      !o.model.model_name_or_path.empty() && fs::exists(generation_file) ? util::read_json_file(generation_file)
                                                                         : nlohmann::json(nullptr),
      o.model.model_name_or_path.empty() ? o.model.config_name : o.model.model_name_or_path);
  if (args.predict_with_generate && !tokenizer) {
    std::cerr << "fitsum: warning: --predict_with_generate without a tokenizer: generation runs, ROUGE is skipped\n";
  }
  memory::Plan plan;
  std::int64_t layers = 0;
  if (planned) {
    inputs.predicted_peak_bytes =
        plan_for_budget(o, command, *loaded.model, inputs.train_examples, device, budget, plan, layers);
    memory::apply_memory_budget(device, budget);
  }
  inputs.update_threads = threads.update;
  print_configuration(o, loaded, device, inputs.train_examples.size(), inputs.eval_examples.size());

  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  train::TrainerCallbacks callbacks;
  auto measured = std::make_shared<std::vector<MeasuredPeak>>();
  callbacks.on_log = [tty, measured](const nlohmann::ordered_json& entry) {
    if (entry.contains("peak_memory_bytes") && entry.contains("step")) {
      measured->push_back({entry["step"].get<std::int64_t>(), entry["peak_memory_bytes"].get<std::uint64_t>()});
    }
    if (tty) std::printf("\r\033[K");
    std::printf("%s\n", entry.dump().c_str());
    std::fflush(stdout);
  };
  callbacks.on_message = [tty](const std::string& message) {
    if (tty) std::printf("\r\033[K");
    std::printf("fitsum: %s\n", message.c_str());
    std::fflush(stdout);
  };
  callbacks.on_step = [tty, start](std::int64_t step, std::int64_t max_steps) {
    if (!tty) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta = step > 0 ? elapsed / static_cast<double>(step) * static_cast<double>(max_steps - step) : 0.0;
    const int width = 30;
    const int filled = static_cast<int>(width * step / std::max<std::int64_t>(1, max_steps));
    std::printf("\r\033[K[%s%s] %lld/%lld steps, %.0f s elapsed, ETA %.0f s", std::string(filled, '#').c_str(),
                std::string(width - filled, ' ').c_str(), static_cast<long long>(step),
                static_cast<long long>(max_steps), elapsed, eta);
    std::fflush(stdout);
  };

  train::Trainer trainer(args, std::move(inputs), callbacks);
  std::printf("training: %lld optimizer steps (%lld per epoch), %lld examples per step = %lld x %lld accumulation\n",
              static_cast<long long>(trainer.max_steps()), static_cast<long long>(trainer.steps_per_epoch()),
              static_cast<long long>(args.per_device_train_batch_size * args.gradient_accumulation_steps),
              static_cast<long long>(args.per_device_train_batch_size),
              static_cast<long long>(args.gradient_accumulation_steps));
  std::fflush(stdout);

  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  struct sigaction previous_int {
  }, previous_term{};
  sigaction(SIGINT, &action, &previous_int);
  sigaction(SIGTERM, &action, &previous_term);
  train::TrainResult result;
  try {
    result = trainer.train();
  } catch (...) {
    sigaction(SIGINT, &previous_int, nullptr);
    sigaction(SIGTERM, &previous_term, nullptr);
    throw;
  }
  sigaction(SIGINT, &previous_int, nullptr);
  sigaction(SIGTERM, &previous_term, nullptr);
  if (result.interrupted) {
    std::printf("fitsum: stopped by signal %d at step %lld; resume with --resume_from_checkpoint latest\n",
                result.stop_signal, static_cast<long long>(result.global_step));
    std::fflush(stdout);
    throw ExitStatus{128 + result.stop_signal};
  }
  if (planned && !o.memory_report.empty()) {
    write_memory_report(o.memory_report, plan, layers, budget, *measured);
    std::printf("fitsum: wrote %s\n", o.memory_report.c_str());
  }
  std::printf("done: %lld steps in %.1f s, train_loss %.6f; model saved to %s\n",
              static_cast<long long>(result.global_step), result.metrics["train_runtime"].get<double>(),
              result.metrics["train_loss"].get<double>(), args.output_dir.c_str());
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto options = std::make_shared<TrainCommandOptions>();
  auto* cmd = app.add_subcommand("train",
                                 "Fine-tune a model (Hugging Face TrainingArguments names; an args.json may come "
                                 "first, flags override it)");
  add_training_flags(*cmd, *options);
  cmd->callback([options, cmd]() { run_train(*options, *cmd); });
}

}  // namespace fitsum::cli
