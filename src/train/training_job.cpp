// Implements include/fitsum/train/training_job.h: from the parsed arguments to a trainer ready to run.
#include "fitsum/train/training_job.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fitsum/families/family.h"
#include "fitsum/generate/options.h"
#include "fitsum/io/adapter.h"
#include "fitsum/io/checkpoint.h"
#include "fitsum/io/checkpoint_folders.h"
#include "fitsum/io/hub.h"
#include "fitsum/io/output_folder_lock.h"
#include "fitsum/memory/calibration.h"
#include "fitsum/memory/device_memory.h"
#include "fitsum/memory/planner.h"
#include "fitsum/memory/static_memory.h"
#include "fitsum/tokenizer/tokenizer.h"
#include "fitsum/train/distributed.h"
#include "fitsum/train/evaluation.h"
#include "fitsum/train/lora_setup.h"
#include "fitsum/train/memory_plan.h"
#include "fitsum/train/model_lengths.h"
#include "fitsum/train/run_folder.h"
#include "fitsum/util/bytes.h"
#include "fitsum/util/checked_math.h"
#include "fitsum/util/files.h"

namespace fitsum::train {

namespace {
namespace fs = std::filesystem;

void say(const Report& report, const std::string& line) {
  if (report.info) report.info(line);
}

void warn(const Report& report, const std::string& line) {
  if (report.warning) report.warning(line);
}

// A line about this process alone (Report::process).
void say_for_process(const Report& report, const std::string& line) {
  if (report.process) {
    report.process(line);
  } else {
    say(report, line);
  }
}

// The arguments' consistency, before anything is loaded.
CheckedOutputDir check_job(TrainingJob& job, const Report& report) {
  auto& args = job.args;
  args.group_by_length = args.group_by_length || job.data.group_by_length;
  if (!args.optim && job.max_memory.empty()) {
    throw std::invalid_argument("optim auto needs max_memory: the memory planner chooses the optimizer");
  }
  args.validate();
  job.data.validate_values();
  if (job.train_file.empty()) throw std::invalid_argument("train_file is required");
  if (args.eval_strategy != IntervalStrategy::no && job.validation_file.empty()) {
    throw std::invalid_argument(std::string("eval_strategy ") + to_string(args.eval_strategy) +
                                " needs validation_file");
  }
  if (args.do_eval && job.validation_file.empty()) throw std::invalid_argument("do_eval needs validation_file");
  if (args.do_predict && job.test_file.empty()) throw std::invalid_argument("do_predict needs test_file");
  // A file given is read, evaluation scheduled or not (run_summarization loads every data file it is given).
  for (const auto& [file, what] : {std::pair{&job.validation_file, "validation_file"}, {&job.test_file, "test_file"}}) {
    if (!file->empty()) util::ReadableFile(*file, what);
  }
  return check_run_folder(job, [&report](const std::string& line) { warn(report, line); });
}

struct ModelAndTokenizer {
  io::LoadedModel loaded;  // without `weights`, its model is null and the rest comes from the preview
  model::ModelConfig config;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
};

// Loads the model (or with `weights` false only its config) and its tokenizer; lowers the maximum lengths to the
// model's positions (with a warning each).
ModelAndTokenizer load_model_and_tokenizer(TrainingJob& job, const Report& report, bool weights = true) {
  ModelAndTokenizer m;
  if (weights) {
    m.loaded = io::load_model(job.model, static_cast<std::uint64_t>(job.args.seed));
    m.config = m.loaded.model->config();
  } else {
    auto preview = io::preview_model(job.model);
    m.config = preview.config;
    m.loaded.config_json = std::move(preview.config_json);
    m.loaded.tokenizer_dir = std::move(preview.tokenizer_dir);
    m.loaded.description = std::move(preview.description);
  }
  if (!m.loaded.tokenizer_dir.empty()) m.tokenizer = families::load_tokenizer(m.loaded.tokenizer_dir);
  fit_lengths_to_model(job.data, m.config, m.tokenizer.get(),
                       [&report](const std::string& line) { warn(report, line); });
  return m;
}

// What an empty text encodes to: the tokenizer's template around nothing, or for pre-tokenized data without a
// tokenizer the model family's (BART: <s> </s>; PEGASUS and T5: </s>).
std::vector<tokenizer::TokenId> empty_text_ids(const ModelAndTokenizer& m) {
  if (m.tokenizer) return m.tokenizer->encode("");
  return families::empty_text_ids(m.config);
}

std::vector<data::Example> read_split(const std::string& file, const ModelAndTokenizer& m,
                                      const data::DataOptions& options, std::optional<std::int64_t> max_samples,
                                      bool drop_empty, const char* what, const Report& report) {
  data::ReadStats stats;
  auto examples = data::read_examples(file, m.tokenizer.get(), m.config.vocab_size, options, max_samples, &stats);
  say(report, std::string(what) + " " + file + ": " + stats.summary(options));
  if (drop_empty) {
    const auto dropped = data::drop_empty_examples(examples, empty_text_ids(m));
    if (dropped > 0) {
      say(report, std::string(what) + ": dropped " + std::to_string(dropped) +
                      " examples with an empty text or summary (keep_empty_examples keeps them)");
    }
  }
  return examples;
}

// The eval and predict data the run evaluates (validation_file with an eval strategy or do_eval; test_file with
// do_predict).
void read_evaluation_splits(const TrainingJob& job, const ModelAndTokenizer& m, TrainerInputs& in,
                            const Report& report) {
  if (job.args.eval_strategy != IntervalStrategy::no || job.args.do_eval) {
    in.eval_examples =
        read_split(job.validation_file, m, job.data, job.data.max_eval_samples, false, "validation_file", report);
  }
  if (job.args.do_predict) {
    in.test_examples = read_split(job.test_file, m, job.data, job.data.max_predict_samples, false, "test_file", report);
  }
}

// Hub ids among the model's names become their folders in the Hugging Face cache, downloaded where missing; what
// the user named stays the model card's base model.
std::string resolve_hub_names(TrainingJob& job, const Report& report) {
  const std::string named = job.model.model_name_or_path.empty() ? job.model.config_name : job.model.model_name_or_path;
  job.model = io::resolve_model_source(job.model, report.download);
  return named;
}

// What the run's evaluations and prediction would otherwise find only when they run, after training steps: an
// empty split, an id they cannot use, generation options generate() refuses (its warnings are printed once, here),
// and a metric_for_best_model the evaluation does not report.
void check_evaluations(const TrainingJob& job, const TrainerInputs& in, const model::ModelConfig& config,
                       const Report& report) {
  const auto& args = job.args;
  const bool evaluates = args.eval_strategy != IntervalStrategy::no || args.do_eval;
  const bool decoded = args.predict_with_generate && in.tokenizer != nullptr;
  if (evaluates) {
    check_evaluation_examples(in.eval_examples, job.validation_file, "validation_file", config.vocab_size,
                              in.tokenizer.get(), decoded);
  }
  if (args.do_predict) {
    check_evaluation_examples(in.test_examples, job.test_file, "test_file", config.vocab_size, in.tokenizer.get(),
                              decoded);
  }
  if (args.predict_with_generate && (evaluates || args.do_predict)) {
    for (const auto& warning : check_generation_for_model(evaluation_generation(args, in.generation), config)) {
      warn(report, "generation: " + warning);
    }
  }
  const auto key = args.best_metric_key();
  if (key.empty() || args.eval_strategy == IntervalStrategy::no) return;
  const bool labelled = std::any_of(in.eval_examples.begin(), in.eval_examples.end(),
                                    [](const data::Example& e) { return e.labels.has_value(); });
  const auto reported = evaluation_metric_keys(labelled, args.predict_with_generate, decoded);
  if (std::find(reported.begin(), reported.end(), key) != reported.end()) return;
  std::string names;
  for (const auto& name : reported) names += (names.empty() ? "" : ", ") + name;
  throw std::invalid_argument("metric_for_best_model is '" + key +
                              "', which this run's evaluation does not report: it reports " + names +
                              " (eval_loss needs summaries in validation_file '" + job.validation_file +
                              "'; ROUGE needs them too, predict_with_generate and a tokenizer; gen_len needs "
                              "predict_with_generate)");
}

generate::GenerationOptions model_generation_options(const TrainingJob& job, const ModelAndTokenizer& m) {
  return model_generation_defaults(m.loaded.config_json, job.model.model_name_or_path, job.model.config_name);
}

// "auto" is the device's free memory; on the CPU the job's processes on this machine share it, so each plans for its
// part (where the launcher says how many there are: LOCAL_WORLD_SIZE and its kin, set by --nproc_per_node too).
std::uint64_t resolve_budget(const std::string& spec, const c10::Device& device, const Report& report) {
  auto bytes = memory::resolve_memory_budget(spec, device);
  if (spec != "auto" || !device.is_cpu()) return bytes;
  const auto local = launch_environment().local_world_size;
  if (local <= 1) return bytes;
  bytes /= static_cast<std::uint64_t>(local);
  say(report, "max_memory auto: the free memory shared by the " + std::to_string(local) +
                  " processes on this machine, " + util::format_bytes(bytes) + " each");
  return bytes;
}

// The processes a plan is for: fitsum plan's --world_size, else the launcher's.
int planned_world_size(const TrainingJob& job) {
  return job.world_size > 0 ? job.world_size : launch_environment().world_size;
}

// With a budget, before the model is loaded: weights, gradients and optimizer state from the config alone; the
// refusal when they exceed it (a 568M-parameter model refused in milliseconds, not after loading it), naming a LoRA
// configuration that fits when full fine-tuning cannot (its probe runs on `device`).
std::optional<memory::FitResult> refusal_before_loading(const TrainingJob& job, std::uint64_t budget,
                                                        const c10::Device& device) {
  const auto request =
      make_fit_request(job.args, job.fixed, {1, job.data.max_source_length, job.data.max_target_length}, budget,
                       planned_world_size(job));
  return memory::refusal_before_loading(io::preview_model(job.model).config, device, request);
}

}  // namespace

std::uint64_t predicted_checkpoint_bytes(const model::ModelConfig& config,
                                         std::optional<optim::OptimizerType> optimizer, std::uint64_t tokenizer_bytes) {
  constexpr std::uint64_t kHeadersAndJsonBytes = 256 * 1024;
  const auto stored = memory::static_training_memory(
      model::count_parameters(config), optimizer.value_or(optim::OptimizerType::adafactor), memory::StorageDtype::fp32);
  const std::string what = "the size of a checkpoint";
  auto bytes = util::checked_add(stored.weights, optimizer ? stored.optimizer_state : 0, what);
  bytes = util::checked_add(bytes, tokenizer_bytes, what);
  return util::checked_add(bytes, kHeadersAndJsonBytes, what);
}

std::optional<std::string> free_disk_warning(const std::string& output_dir, std::uint64_t free_bytes,
                                             std::uint64_t checkpoint_bytes) {
  if (free_bytes >= checkpoint_bytes) return std::nullopt;
  return "output_dir '" + output_dir + "' has " + util::format_bytes(free_bytes) +
         " free, less than one checkpoint takes (about " + util::format_bytes(checkpoint_bytes) +
         "); the first save will fail with no space left unless some is freed: free space there or choose an "
         "output_dir on another disk";
}

memory::BatchShape worst_batch_shape(const std::vector<data::Example>& examples, const data::DataOptions& data) {
  memory::BatchShape worst{1, data.max_source_length, data.max_target_length};
  if (!examples.empty()) {
    worst.source = 1;
    worst.target = 1;
    for (const auto& e : examples) {
      worst.source = std::max<std::int64_t>(worst.source, static_cast<std::int64_t>(e.input_ids.size()));
      if (e.labels) worst.target = std::max<std::int64_t>(worst.target, static_cast<std::int64_t>(e.labels->size()));
    }
  }
  if (data.pad_to_multiple_of && *data.pad_to_multiple_of > 1) {
    const auto m = *data.pad_to_multiple_of;
    worst.source = (worst.source + m - 1) / m * m;
    worst.target = (worst.target + m - 1) / m * m;
  }
  return worst;
}

// The adapters a run trains, planned before they exist: lora_r's, or the adapter_config.json of the one it continues.
model::LoraConfig planned_lora(const TrainingArguments& args) {
  if (args.lora.enabled() || !io::is_adapter_folder(args.adapter_name_or_path)) return args.lora;
  return io::open_adapter_folder(args.adapter_name_or_path).config;
}

memory::FitRequest make_fit_request(const TrainingArguments& args, const FixedKnobs& fixed,
                                    const memory::BatchShape& worst, std::uint64_t budget, int world_size) {
  memory::FitRequest request;
  request.world_size = world_size;
  if (fixed.zero_stage) request.zero_stage = args.zero_stage;
  request.bucket_bytes = args.ddp_bucket_bytes();
  request.budget = budget;
  request.worst = worst;
  request.effective_batch = args.per_device_train_batch_size * args.gradient_accumulation_steps;
  if (fixed.micro_batch) request.micro_batch = args.per_device_train_batch_size;
  // optim unset: HF's default, kept unless nothing with it fits; an explicit optim is kept; "auto" is free.
  request.optimizer = args.optim.value_or(optim::OptimizerType::adamw_torch);
  request.optimizer_policy = !args.optim       ? memory::OptimizerPolicy::free
                             : fixed.optimizer ? memory::OptimizerPolicy::fixed
                                               : memory::OptimizerPolicy::preferred;
  if (fixed.checkpointing) request.checkpointed_layers = args.checkpointed_layers();
  request.bf16 = args.bf16;
  request.freeze_embeds = args.freeze_embeds;
  request.lora = planned_lora(args);
  request.base_bfloat16 = request.lora.enabled() && args.base_dtype == "bfloat16";
  request.label_smoothing = args.label_smoothing_factor;
  add_offload_request(args, request);
  return request;
}

void apply_plan(TrainingArguments& args, const memory::PlanKnobs& knobs, const model::ModelConfig& config) {
  if (!args.data_batch_size) args.data_batch_size = args.per_device_train_batch_size;  // the data order's batch
  args.per_device_train_batch_size = knobs.micro_batch;
  args.gradient_accumulation_steps = knobs.accumulation;
  const auto all = std::numeric_limits<std::int64_t>::max();
  if (knobs.encoder_checkpointed >= config.encoder_layers && knobs.decoder_checkpointed >= config.decoder_layers) {
    args.set_checkpointed_layers(all, all);
  } else {
    args.set_checkpointed_layers(knobs.encoder_checkpointed, knobs.decoder_checkpointed);
  }
  args.optim = knobs.optimizer;
  args.bf16 = knobs.bf16;
  args.zero_stage = knobs.zero_stage;
  args.offload_optimizer = knobs.offload_optimizer ? optim::OffloadDevice::cpu : optim::OffloadDevice::none;
  if (knobs.eval_batch > 0) args.per_device_eval_batch_size = knobs.eval_batch;
}

std::optional<memory::EvaluationLoad> evaluation_load(const TrainingArguments& args, const TrainerInputs& inputs,
                                                      const data::DataOptions& data) {
  if (inputs.eval_examples.empty() && inputs.test_examples.empty()) return std::nullopt;
  auto worst = worst_batch_shape(inputs.eval_examples, data);
  const auto test = worst_batch_shape(inputs.test_examples, data);
  if (inputs.eval_examples.empty()) worst = test;
  if (!inputs.test_examples.empty()) {
    worst.source = std::max(worst.source, test.source);
    worst.target = std::max(worst.target, test.target);
  }
  const auto generation = evaluation_generation(args, inputs.generation);
  memory::EvaluationLoad load;
  load.batch = args.per_device_eval_batch_size;
  load.source_length = worst.source;
  load.target_length = worst.target;
  load.generate = args.predict_with_generate;
  load.num_beams = generation.num_beams;
  load.max_length = generation.effective_max_length();
  load.use_cache = generation.use_cache;
  load.bf16 = args.bf16;
  return load;
}

namespace {

// Under torchrun, mpirun or srun: joins the job's other processes (after everything that can reject the arguments,
// so that a process whose arguments are wrong fails before the others wait for it).
void join_launched_processes(PreparedTraining& p, const Report& report) {
  const auto env = launch_environment();
  if (!env.distributed()) return;
  const auto backend = p.args.ddp_backend.empty() ? default_ddp_backend(p.inputs.device) : p.args.ddp_backend;
  say_for_process(report, "process " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) + " (" +
                              env.launcher + "), rendezvous " + env.master_addr + ":" +
                              std::to_string(env.master_port) + ", " + backend);
  p.inputs.process_group =
      ProcessGroup::connect(env, backend, std::chrono::seconds(p.args.ddp_timeout), p.inputs.device);
}

// Whether the processes of a job plan (with --max_memory): every one or none; throws when only some do.
bool every_process_plans(const PreparedTraining& p) {
  const auto& group = p.inputs.process_group;
  if (!group) return false;
  auto count = torch::full({1}, p.budget > 0 ? 1.0 : 0.0, torch::kDouble);
  group->all_reduce_sum(count);
  const auto planners = static_cast<int>(count.item<double>());
  if (planners != 0 && planners != group->size()) {
    throw std::invalid_argument("max_memory is given to " + std::to_string(planners) + " of " +
                                std::to_string(group->size()) + " processes: give it to every process or to none");
  }
  return planners != 0;
}

// With --max_memory every process planned for its own device, and the processes must train alike: rank 0's plan is
// the job's. Another process takes it when its own prediction of that plan fits its budget (on equal devices the
// plans only differ where timing noise broke a tie); otherwise every process stops, naming the numbers.
void adopt_rank_zero_plan(PreparedTraining& p, const model::ModelConfig& config, const Report& report) {
  const auto& group = p.inputs.process_group;
  if (!group || !p.fit) return;  // every process planned, or none (every_process_plans)
  const auto& own = p.fit->chosen->knobs;
  auto knobs = torch::tensor({own.micro_batch, own.accumulation, own.encoder_checkpointed, own.decoder_checkpointed,
                              static_cast<std::int64_t>(own.optimizer), std::int64_t{own.bf16}, own.eval_batch,
                              std::int64_t{own.zero_stage}, std::int64_t{own.offload_optimizer}},
                             torch::kLong);
  group->broadcast(knobs, 0);
  auto chosen = own;
  const auto value = [&](std::int64_t i) { return knobs[i].item<std::int64_t>(); };
  chosen.micro_batch = value(0);
  chosen.accumulation = value(1);
  chosen.encoder_checkpointed = value(2);
  chosen.decoder_checkpointed = value(3);
  chosen.optimizer = static_cast<optim::OptimizerType>(value(4));
  chosen.bf16 = value(5) != 0;
  chosen.eval_batch = value(6);
  chosen.zero_stage = static_cast<int>(value(7));
  chosen.offload_optimizer = value(8) != 0;
  const auto flags = memory::plan_arguments(chosen, *p.fit->calibration);
  auto prediction = memory::predict(*p.fit->calibration, chosen, p.fit->worst);
  if (p.fit->evaluation) {  // its eval batch too: evaluation may set the peak
    memory::add_evaluation(p.fit->calibration->config, *p.fit->evaluation, chosen.eval_batch, prediction);
  }
  const auto needs = memory::with_margin(prediction.peak, memory::kPlanMargin);
  const bool fits = needs <= p.budget;
  if (group->any(!fits)) {
    throw std::invalid_argument(
        fits ? "another process cannot fit rank 0's memory plan (" + flags +
                   ") in its max_memory; give every process "
                   "the same device and budget, or the plan's flags explicitly"
             : "rank 0's memory plan (" + flags + ") needs " + util::format_bytes(needs) + " here (with the margin), " +
                   "over this process's max_memory " + util::format_bytes(p.budget) +
                   "; give every process the same device and budget, or the plan's flags explicitly");
  }
  if (group->rank() == 0 || flags == memory::plan_arguments(own, *p.fit->calibration)) return;
  apply_plan(p.args, chosen, config);
  p.inputs.predicted_peak_bytes = static_cast<std::int64_t>(prediction.peak);
  p.fit->chosen->knobs = chosen;  // what this process prints as its plan's flags
  p.fit->chosen->prediction = prediction;
  say_for_process(report, "taking rank 0's memory plan (" + flags + "; predicted peak here " +
                              util::format_bytes(prediction.peak) + ") instead of this process's own");
}

// Every check passed and the run starts: rank 0 creates output_dir (when it did not exist) and takes its lock, and
// every process of the job learns that it holds it before any of them writes there.
std::shared_ptr<io::OutputFolderLock> hold_output_dir(std::shared_ptr<io::OutputFolderLock> lock,
                                                      const std::string& output_dir,
                                                      const std::shared_ptr<ProcessGroup>& group) {
  std::exception_ptr failed;
  // Rank 0 writes into output_dir for the whole job; the other processes never do on their own.
  if (!lock && (group ? group->rank() == 0 : launch_environment().rank == 0)) {
    try {
      lock = std::make_shared<io::OutputFolderLock>(output_dir);
    } catch (...) {
      failed = std::current_exception();
    }
  }
  if (group && group->any(failed != nullptr) && !failed) {
    throw std::runtime_error("rank 0 could not take the lock of output_dir '" + output_dir +
                             "' (its error says why); this process stops with it");
  }
  if (failed) std::rethrow_exception(failed);
  return lock;
}

}  // namespace

PreparedTraining prepare_training(TrainingJob job, const util::Runtime& runtime, const Report& report) {
  auto output_dir = check_job(job, report);
  const std::string base_model = resolve_hub_names(job, report);
  if (const auto warning = free_disk_warning_for(job, output_dir.nearest_folder)) warn(report, *warning);
  PreparedTraining p;
  memory::start_tracking(runtime.device);  // before the weights: the budget and logged peaks count all, as on CUDA
  if (!job.max_memory.empty()) {
    p.budget = resolve_budget(job.max_memory, runtime.device, report);
    if (auto refused = refusal_before_loading(job, p.budget, runtime.device))
      throw memory::PlanDoesNotFit(std::move(*refused));
  }
  auto m = load_model_and_tokenizer(job, report);
  if (const auto lora = prepare_lora(*m.loaded.model, job.args); !lora.empty()) say(report, lora);  // before planning
  p.model_description = m.loaded.description;
  p.tokenizer_description =
      m.loaded.tokenizer_dir.empty() ? "(none: pre-tokenized data only)" : m.loaded.tokenizer_dir.string();
  auto& in = p.inputs;
  in.train_examples = read_split(job.train_file, m, job.data, job.data.max_train_samples, !job.keep_empty_examples,
                                 "train_file", report);
  read_evaluation_splits(job, m, in, report);
  in.model_name_or_path = base_model;
  in.model_dir = job.model.model_name_or_path;
  in.train_file = job.train_file;
  in.validation_file = job.validation_file;
  in.test_file = job.test_file;
  const auto& config = m.loaded.model->config();
  in.model = m.loaded.model;
  in.config_json = m.loaded.config_json;
  in.tokenizer_dir = m.loaded.tokenizer_dir;
  in.collator.pad_token_id = config.pad_token_id;
  in.collator.pad_to_multiple_of = job.data.pad_to_multiple_of;
  in.device = runtime.device;
  in.tokenizer = m.tokenizer;
  in.update_threads = runtime.threads.update;
  in.generation = model_generation_options(job, m);
  if (job.args.predict_with_generate && !m.tokenizer) {
    warn(report, "predict_with_generate without a tokenizer: generation runs, ROUGE is skipped");
  }
  check_evaluations(job, in, config, report);
  p.args = job.args;
  join_launched_processes(p, report);
  const bool together = every_process_plans(p);
  if (p.budget > 0) {
    BudgetPlanOptions plan;
    plan.budget = p.budget;
    plan.worst = worst_batch_shape(p.inputs.train_examples, job.data);
    plan.fixed = job.fixed;
    plan.world_size = planned_world_size(job);
    plan.evaluation = evaluation_load(p.args, p.inputs, job.data);
    if (together) plan.share_calibration = p.inputs.process_group;
    p.fit = plan_and_apply(*p.inputs.model, p.args, plan, runtime, report);
    p.inputs.predicted_peak_bytes = static_cast<std::int64_t>(p.fit->chosen->prediction.peak);
  }
  adopt_rank_zero_plan(p, config, report);
  p.inputs.output_dir_lock = hold_output_dir(std::move(output_dir.lock), p.args.output_dir, p.inputs.process_group);
  return p;
}

memory::FitResult plan_training(TrainingJob job, const util::Runtime& runtime, const Report& report) {
  if (job.args.output_dir.empty()) job.args.output_dir = ".";  // nothing is written
  job.args.validate();
  job.data.validate_values();
  resolve_hub_names(job, report);
  memory::start_tracking(runtime.device);
  if (job.plan_for_cuda && (job.max_memory.empty() || job.max_memory == "auto")) {
    throw std::invalid_argument(
        "device cuda: this machine has no CUDA device whose free memory max_memory auto could read; give the GPU's "
        "memory as --max_memory SIZE (e.g. 80GB for an H100) to plan for it here");
  }
  const auto budget = resolve_budget(job.max_memory.empty() ? "auto" : job.max_memory, runtime.device, report);
  if (auto refused = refusal_before_loading(job, budget, runtime.device)) return *refused;
  const bool weights = job.plan_for_cuda || !memory::can_fit_without_weights(runtime.device, runtime.cuda_alloc_conf);
  auto m = load_model_and_tokenizer(job, report, weights);
  std::vector<data::Example> examples;
  if (!job.train_file.empty()) {
    examples = read_split(job.train_file, m, job.data, job.data.max_train_samples, !job.keep_empty_examples,
                          "train_file", report);
  }
  const auto worst = worst_batch_shape(examples, job.data);
  say(report, m.loaded.description + "; worst batch " + std::to_string(worst.source) + " source x " +
                  std::to_string(worst.target) + " target tokens per example" +
                  (examples.empty() ? " (from the max lengths)" : " (from the data)"));
  auto request = make_fit_request(job.args, job.fixed, worst, budget, planned_world_size(job));
  request.cuda_alloc_conf = runtime.cuda_alloc_conf;  // on the CPU too: the plan then reports CUDA's reserved bytes
  request.for_cuda_device = job.plan_for_cuda;
  TrainerInputs evaluated;
  read_evaluation_splits(job, m, evaluated, report);
  evaluated.generation = model_generation_options(job, m);
  request.evaluation = evaluation_load(job.args, evaluated, job.data);
  memory::FitResult fit;
  if (weights) {
    auto& model = *m.loaded.model;
    model.to(runtime.device);
    prepare_lora(model, job.args);  // the CUDA allocator model replays the trainable tensors alone
    fit = memory::fit_training(model, request);
  } else {
    fit = memory::fit_training(m.config, runtime.device, request);
  }
  if (!fit.optimizer_warning.empty()) warn(report, fit.optimizer_warning);
  if (!fit.evaluation_warning.empty()) warn(report, fit.evaluation_warning);
  return fit;
}

}  // namespace fitsum::train
