// Implements tools/fitsum/train_flags.h.
#include "train_flags.h"

#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "argument_text.h"
#include "data_flags.h"
#include "fitsum/util/bytes.h"
#include "fitsum/util/files.h"
#include "fitsum/util/output_paths.h"
#include "hf_arguments.h"
#include "hub_flags.h"
#include "lora_flags.h"
#include "runtime_flags.h"

namespace fitsum::cli {

namespace {

// An option whose text goes through `parse` (one of the library's parse_* functions) into a typed field.
template <typename T, typename Parse>
CLI::Option* add_parsed(CLI::App& group, const std::string& name, T& field, Parse parse, const std::string& help,
                        const std::string& default_text) {
  return group
      .add_option_function<std::string>(
          name, [&field, parse](const std::string& text) { field = parse(text); }, help)
      ->default_str(default_text);
}

// --max_host_memory: a size, or auto (0: the machine's available memory when the host memory is needed).
std::uint64_t parse_host_memory(const std::string& text) {
  if (text == "auto") return 0;
  std::uint64_t bytes = 0;
  try {
    bytes = util::parse_bytes(text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--max_host_memory: ") + e.what());
  }
  if (bytes == 0) throw std::invalid_argument("--max_host_memory must be above 0 (a size such as 32GiB, or auto)");
  return bytes;
}

void add_model_flags(CLI::App& g, io::ModelSource& model) {
  g.add_option("--model_name_or_path", model.model_name_or_path,
               "Hugging Face model folder, or Hub id (org/name), to fine-tune");
  g.add_option("--config_name", model.config_name, "config.json (or Hub id) for training from random weights");
  add_tokenizer_name_flag(g, model.tokenizer_name);
  g.add_option("--config_overrides", model.config_overrides,
               "change config fields at load, e.g. \"dropout=0.0,attention_dropout=0.0\"");
  add_hub_flags(g, model);
}

void add_data_flags(CLI::App& g, train::TrainingJob& job) {
  g.add_option("--train_file", job.train_file, "training data: jsonl, json or csv (text or pre-tokenized)");
  g.add_option("--validation_file", job.validation_file, "evaluation data, same formats");
  g.add_option("--test_file", job.test_file, "with --do_predict: data to predict, same formats");
  add_tokenization_flags(g, job.data);
  add_sample_limit_flags(g, job.data);
  g.add_option_function<std::int64_t>(
      "--max_predict_samples", [&job](const std::int64_t& n) { job.data.max_predict_samples = n; },
      "Use only the first N test examples");
  add_batching_flags(g, job.data);
  g.add_flag("--keep_empty_examples", job.keep_empty_examples,
             "train on records whose text or summary is empty (run_summarization.py drops them)");
}

void add_optimization_flags(CLI::App& g, train::TrainingArguments& t) {
  g.add_option("--output_dir", t.output_dir, "where checkpoints and the final model go");
  g.add_flag("--overwrite_output_dir", t.overwrite_output_dir, "allow an output_dir that already holds a run");
  g.add_option("--num_train_epochs", t.num_train_epochs, "epochs to train (fractional allowed)")->capture_default_str();
  g.add_option("--max_steps", t.max_steps, "optimizer steps; overrides num_train_epochs when > 0")
      ->capture_default_str();
  g.add_option("--per_device_train_batch_size", t.per_device_train_batch_size, "micro-batch size")
      ->capture_default_str();
  g.add_option("--gradient_accumulation_steps", t.gradient_accumulation_steps, "micro-batches per optimizer step")
      ->capture_default_str();
  g.add_option("--learning_rate", t.learning_rate, "peak learning rate")->capture_default_str();
  g.add_option("--weight_decay", t.weight_decay, "decoupled weight decay (not on biases and LayerNorms)")
      ->capture_default_str();
  g.add_option("--adam_beta1", t.adam_beta1, "AdamW beta1")->capture_default_str();
  g.add_option("--adam_beta2", t.adam_beta2, "AdamW beta2")->capture_default_str();
  g.add_option("--adam_epsilon", t.adam_epsilon, "AdamW epsilon")->capture_default_str();
  g.add_option("--max_grad_norm", t.max_grad_norm, "gradient clipping norm; 0 disables")->capture_default_str();
  add_parsed(g, "--lr_scheduler_type", t.lr_scheduler_type, train::parse_lr_scheduler_type,
             "linear, constant, constant_with_warmup, cosine", "linear");
  g.add_option("--warmup_steps", t.warmup_steps, "linear warmup steps")->capture_default_str();
  g.add_option("--warmup_ratio", t.warmup_ratio, "warmup as a fraction of the steps (when warmup_steps is 0)")
      ->capture_default_str();
  add_parsed(g, "--optim", t.optim, train::parse_optim,
             "adamw_torch (adamw_hf is an alias), adafactor, or auto (the planner's choice, under --max_memory)",
             "adamw_torch");
  g.add_option("--label_smoothing_factor", t.label_smoothing_factor, "label smoothing epsilon")->capture_default_str();
  g.add_option("--seed", t.seed, "seed of data order, dropout and random init")->capture_default_str();
  g.add_option_function<std::int64_t>(
      "--data_seed", [&t](const std::int64_t& n) { t.data_seed = n; },
      "seed of the shuffle alone (default: seed; --group_by_length orders by --seed, as HF does)");
  g.add_flag("--dataloader_drop_last", t.dataloader_drop_last, "leave out each epoch's last incomplete batch");
  g.add_flag("--dataloader_pin_memory", t.dataloader_pin_memory,
             "on CUDA, pin each batch in host memory and copy it asynchronously (default true)");
  g.add_option("--resume_from_checkpoint", t.resume_from_checkpoint, "a checkpoint folder, or 'latest'");
}

void add_memory_flags(CLI::App& g, TrainCommandOptions& o) {
  auto& t = o.job.args;
  g.add_option("--max_memory", o.job.max_memory,
               "memory budget, e.g. 6GiB or 800MiB, or auto (free memory): plan the fastest configuration that "
               "fits and enforce the budget");
  g.add_flag("--gradient_checkpointing", t.gradient_checkpointing,
             "recompute every layer's activations in backward (less memory, ~1/3 more compute)");
  g.add_option_function<std::int64_t>(
      "--gradient_checkpointing_layers", [&t](const std::int64_t& n) { t.gradient_checkpointing_layers = n; },
      "with --gradient_checkpointing: only the first N layers of each stack");
  g.add_option_function<std::int64_t>(
      "--gradient_checkpointing_encoder_layers",
      [&t](const std::int64_t& n) { t.gradient_checkpointing_encoder_layers = n; },
      "with --gradient_checkpointing: only the first N encoder layers (overrides --gradient_checkpointing_layers)");
  g.add_option_function<std::int64_t>(
      "--gradient_checkpointing_decoder_layers",
      [&t](const std::int64_t& n) { t.gradient_checkpointing_decoder_layers = n; },
      "with --gradient_checkpointing: only the first N decoder layers (overrides --gradient_checkpointing_layers)");
  g.add_flag("--freeze_embeds", t.freeze_embeds,
             "do not train the shared token embedding (nor, through the tie, the LM head): HF's legacy seq2seq "
             "recipe for PEGASUS; saves its gradient and optimizer state");
  g.add_flag("--bf16", t.bf16, "bfloat16 autocast with float32 weights and optimizer");
  g.add_flag("--fp16", t.fp16, "refused (PEGASUS and T5 overflow float16); use --bf16");
  add_parsed(g, "--offload_optimizer", t.offload_optimizer, train::parse_offload_optimizer,
             "none, cpu (the optimizer's state and update in host memory, the weights and gradients on the device), "
             "or auto (the planner offloads where that is the fastest plan that fits --max_memory)",
             "none");
  g.add_option_function<std::string>(
       "--max_host_memory", [&t](const std::string& s) { t.max_host_memory = parse_host_memory(s); },
       "host memory an offloaded optimizer may use, e.g. 32GiB (default: the machine's available memory)")
      ->default_str("auto");
  g.add_flag("--no_resplit", o.no_resplit,
             "keep per_device_train_batch_size and gradient_accumulation_steps as given when planning");
  g.add_option("--memory_report", o.memory_report,
               "with --max_memory: write an SVG of the predicted breakdown per candidate and, after training, the "
               "measured peak per logged step against the budget");
}

void add_evaluation_flags(CLI::App& g, train::TrainingArguments& t) {
  add_parsed(
      g, "--eval_strategy,--evaluation_strategy", t.eval_strategy,
      [](const std::string& s) { return train::parse_interval_strategy(s, "eval_strategy"); }, "no, steps or epoch",
      "no");
  g.add_option_function<double>(
      "--eval_steps", [&t](const double& v) { t.eval_steps = v; }, "evaluate every N steps (default: logging_steps)");
  g.add_option("--per_device_eval_batch_size", t.per_device_eval_batch_size, "evaluation batch size")
      ->capture_default_str();
  g.add_flag("--predict_with_generate", t.predict_with_generate,
             "generate at evaluation and report ROUGE next to eval_loss");
  g.add_option_function<std::int64_t>(
      "--generation_num_beams,--num_beams", [&t](const std::int64_t& n) { t.generation_num_beams = n; },
      "beams for --predict_with_generate (default: the model's generation config)");
  g.add_option_function<std::int64_t>(
      "--generation_max_length", [&t](const std::int64_t& n) { t.generation_max_length = n; },
      "max_length for --predict_with_generate (default: the model's generation config)");
  g.add_flag("--rouge_split_sentences", t.rouge_split_sentences,
             "rougeLsum over sentences split one per line, as fitsum eval --rouge_split_sentences");
  g.add_flag("--do_eval", t.do_eval, "after training: evaluate on validation_file, write eval_results.json");
  g.add_flag("--do_predict", t.do_predict,
             "after training: predict test_file, write predict_results.json (and generated_predictions.txt with "
             "--predict_with_generate)");
}

void add_best_model_flags(CLI::App& g, train::TrainingArguments& t) {
  g.add_flag("--load_best_model_at_end", t.load_best_model_at_end,
             "the model saved at the end is the best checkpoint's (needs matching eval and save strategies)");
  g.add_option_function<std::string>(
      "--metric_for_best_model", [&t](const std::string& name) { t.metric_for_best_model = name; },
      "loss, rouge1, rouge2, rougeL, rougeLsum, gen_len (eval_ is prefixed; default with load_best_model_at_end: "
      "loss)");
  g.add_flag_function(
      "--greater_is_better", [&t](std::int64_t count) { t.greater_is_better = count > 0; },
      "whether a larger metric is better (default: false for a loss, true otherwise)");
  g.add_option_function<std::int64_t>(
      "--early_stopping_patience", [&t](const std::int64_t& n) { t.early_stopping_patience = n; },
      "stop after N evaluations in a row without improvement (HF's EarlyStoppingCallback)");
  g.add_option("--early_stopping_threshold", t.early_stopping_threshold,
               "how much the metric must improve to count as an improvement")
      ->capture_default_str();
}

void add_logging_flags(CLI::App& g, train::TrainingArguments& t, bool& disable_tqdm) {
  g.add_flag("--disable_tqdm", disable_tqdm,
             "no progress on stderr (by default: redrawn on a terminal, else a line every 30 s and at each log)");
  add_parsed(
      g, "--logging_strategy", t.logging_strategy,
      [](const std::string& s) { return train::parse_interval_strategy(s, "logging_strategy"); }, "no, steps or epoch",
      "steps");
  g.add_option("--logging_steps", t.logging_steps, "log every N steps (< 1: a fraction of the run)")
      ->capture_default_str();
  g.add_flag("--logging_first_step", t.logging_first_step, "also log after the first optimizer step");
  g.add_option_function<std::vector<std::string>>(
       "--report_to",
       [&t](const std::vector<std::string>& values) { t.report_to_tensorboard = train::parse_report_to(values); },
       "tensorboard (or all): TensorBoard event files under logging_dir; none (the default): none")
      ->expected(0, CLI::detail::expected_max_vector_size)
      ->allow_extra_args(true);
  g.add_option("--logging_dir", t.logging_dir,
               "where report_to tensorboard writes (default: output_dir/runs/<Mon><DD>_<HH>-<MM>-<SS>_<hostname>)");
  add_parsed(
      g, "--save_strategy", t.save_strategy,
      [](const std::string& s) { return train::parse_interval_strategy(s, "save_strategy"); }, "no, steps or epoch",
      "steps");
  g.add_option("--save_steps", t.save_steps, "checkpoint every N steps (1e6 is fine)")->capture_default_str();
  g.add_option_function<std::int64_t>(
      "--save_total_limit", [&t](const std::int64_t& n) { t.save_total_limit = n; },
      "keep only the newest N checkpoints");
  g.add_option("--ddp_backend", t.ddp_backend,
               "with several processes (torchrun, mpirun, srun): gloo (CPU processes) or nccl (GPUs); default: nccl on "
               "CUDA devices where this build has it, else gloo");
  g.add_option("--ddp_timeout", t.ddp_timeout, "seconds a process waits for the others before it gives up")
      ->capture_default_str();
  g.add_option("--zero_stage", t.zero_stage,
               "with several processes: 0, 1 to shard the optimizer state across them (ZeRO stage 1), or 2 to shard "
               "the gradients too (ZeRO stage 2)")
      ->capture_default_str();
  g.add_option("--ddp_bucket_cap_mb", t.ddp_bucket_cap_mb,
               "with several processes: MiB of gradients summed over the processes at a time during the backward "
               "(a bucket; DDP's bucket_cap_mb)")
      ->capture_default_str();
}

// HF accepts both spellings; a file that gives them different values is ambiguous.
void check_strategy_spellings(const std::string& file, const nlohmann::json& config) {
  const auto a = config.find("eval_strategy");
  const auto b = config.find("evaluation_strategy");
  if (a != config.end() && b != config.end() && !a->is_null() && !b->is_null() && *a != *b) {
    throw UsageError("'" + file + "': eval_strategy " + a->dump() + " and evaluation_strategy " + b->dump() +
                     " disagree; keep one of them");
  }
}

// One JSON entry as command-line words: booleans as --flag=true|false, lists as one word per element, objects as
// their JSON text; null entries are left out (HF's default).
void append_json_value(std::vector<std::string>& out, const std::string& flag, const nlohmann::json& value,
                       const std::string& where) {
  if (value.is_null()) return;
  if (value.is_boolean()) {
    out.push_back(flag + "=" + (value.get<bool>() ? "true" : "false"));
    return;
  }
  out.push_back(flag);
  if (value.is_string()) {
    out.push_back(value.get<std::string>());
  } else if (value.is_number() || value.is_object()) {
    out.push_back(value.dump());
  } else if (value.is_array()) {
    for (const auto& element : value) {
      if (!element.is_string() && !element.is_number()) throw UsageError(where + " must list strings or numbers");
      out.push_back(element.is_string() ? element.get<std::string>() : element.dump());
    }
  } else {
    throw UsageError(where + " must be a string, number, boolean, list or object");
  }
}

}  // namespace

void require_training_output_files(const TrainCommandOptions& o) {
  const auto& job = o.job;
  const std::vector<util::NamedPath> inputs = {{"--train_file", job.train_file},
                                               {"--validation_file", job.validation_file},
                                               {"--test_file", job.test_file},
                                               {"--config_name", job.model.config_name}};
  util::require_output_files({{"--memory_report", o.memory_report}}, inputs);
}

void add_training_flags(CLI::App& cmd, TrainCommandOptions& o) {
  // Flags given twice (a JSON file, then the command line) take the last value; option groups inherit this.
  cmd.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_flags(*cmd.add_option_group("Model", "ModelArguments of run_summarization.py"), o.job.model);
  add_data_flags(*cmd.add_option_group("Data", "DataTrainingArguments of run_summarization.py"), o.job);
  add_optimization_flags(*cmd.add_option_group("Training", "TrainingArguments: the optimization"), o.job.args);
  add_memory_flags(*cmd.add_option_group("Memory",
                                         "the memory budget and the knobs the planner may choose "
                                         "(docs/memory.md)"),
                   o);
  add_lora_flags(*cmd.add_option_group("LoRA", "low-rank adapters on a frozen base, PEFT's LoraConfig"),
                 o.job.args.lora, o.job.args.base_dtype, &o.job.args.adapter_name_or_path);
  add_evaluation_flags(*cmd.add_option_group("Evaluation", "evaluation during training"), o.job.args);
  add_best_model_flags(*cmd.add_option_group("Best model", "best checkpoint and early stopping"), o.job.args);
  add_logging_flags(*cmd.add_option_group("Logging", "logs and checkpoints"), o.job.args, o.disable_tqdm);
  add_runtime_flags(*cmd.add_option_group("Runtime", "device and threads"), o.runtime);
  add_hf_compatibility_arguments(cmd);
}

train::TrainingJob training_job(const CLI::App& command, const TrainCommandOptions& options) {
  auto job = options.job;
  const auto given = [&command](const char* flag) { return command.get_option(flag)->count() > 0; };
  job.fixed.micro_batch = options.no_resplit;
  job.fixed.optimizer = given("--optim") && job.args.optim.has_value();
  job.fixed.zero_stage = given("--zero_stage");
  job.fixed.checkpointing = given("--gradient_checkpointing") || given("--gradient_checkpointing_layers") ||
                            given("--gradient_checkpointing_encoder_layers") ||
                            given("--gradient_checkpointing_decoder_layers");
  return job;
}

std::vector<std::string> expand_json_arguments(const CLI::App& command, const std::vector<std::string>& args) {
  if (args.empty()) return args;
  const std::string& first = args.front();
  if (first.rfind("-", 0) == 0 || first.size() < 5 || first.compare(first.size() - 5, 5, ".json") != 0) {
    return args;
  }
  const auto config = util::read_json_file(first);
  if (!config.is_object()) {
    throw std::invalid_argument("'" + first + "' must hold a JSON object of training arguments");
  }
  check_strategy_spellings(first, config);
  std::vector<std::string> expanded;
  for (auto it = config.begin(); it != config.end(); ++it) {
    const std::string flag = "--" + it.key();
    if (auto words = lora_json_arguments(it.key(), it.value(), first)) {
      expanded.insert(expanded.end(), words->begin(), words->end());
      continue;
    }
    if (command.get_option_no_throw(flag) == nullptr) {
      const auto suggestion = suggested_flag(command, flag);
      throw UsageError("'" + first + "': unknown key '" + it.key() + "'" +
                       (suggestion.empty() ? " (see fitsum " + command.get_name() + " --help for the names)"
                                           : "; did you mean '" + suggestion.substr(2) + "'?"));
    }
    append_json_value(expanded, flag, it.value(), "'" + first + "': key '" + it.key() + "'");
  }
  expanded.insert(expanded.end(), args.begin() + 1, args.end());
  return expanded;
}

}  // namespace fitsum::cli
