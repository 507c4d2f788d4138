// Implements tools/fitsum/train_flags.h.
#include "train_flags.h"

#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "data_flags.h"
#include "fitsum/util/files.h"

namespace fitsum::cli {

void add_training_flags(CLI::App& cmd, TrainCommandOptions& o) {
  // Flags given twice (a JSON file, then the command line) take the last value.
  cmd.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto& t = o.training;

  // ModelArguments
  cmd.add_option("--model_name_or_path", o.model.model_name_or_path, "Hugging Face model folder to fine-tune");
  cmd.add_option("--config_name", o.model.config_name, "config.json for training from random weights");
  cmd.add_option("--tokenizer_name", o.model.tokenizer_name, "folder with spiece.model (default: the model's)");
  cmd.add_option("--config_overrides", o.model.config_overrides,
                 "change config fields at load, e.g. \"dropout=0.0,attention_dropout=0.0\"");
  // DataTrainingArguments
  cmd.add_option("--train_file", o.train_file, "training data: jsonl, json or csv (text or pre-tokenized)");
  cmd.add_option("--validation_file", o.validation_file, "evaluation data, same formats");
  add_tokenization_flags(cmd, o.data);
  add_sample_limit_flags(cmd, o.data);
  add_batching_flags(cmd, o.data);
  cmd.add_flag("--keep_empty_examples", o.keep_empty_examples,
               "train on records whose text or summary is empty (run_summarization.py drops them)");
  // TrainingArguments
  cmd.add_option("--output_dir", t.output_dir, "where checkpoints and the final model go");
  cmd.add_flag("--overwrite_output_dir", t.overwrite_output_dir, "allow an output_dir that already holds a run");
  cmd.add_option("--num_train_epochs", t.num_train_epochs, "epochs to train (fractional allowed)")
      ->capture_default_str();
  cmd.add_option("--max_steps", t.max_steps, "optimizer steps; overrides num_train_epochs when > 0")
      ->capture_default_str();
  cmd.add_option("--per_device_train_batch_size", t.per_device_train_batch_size, "micro-batch size")
      ->capture_default_str();
  cmd.add_option("--per_device_eval_batch_size", t.per_device_eval_batch_size, "evaluation batch size")
      ->capture_default_str();
  cmd.add_option("--gradient_accumulation_steps", t.gradient_accumulation_steps, "micro-batches per optimizer step")
      ->capture_default_str();
  cmd.add_option("--learning_rate", t.learning_rate, "peak learning rate")->capture_default_str();
  cmd.add_option("--weight_decay", t.weight_decay, "decoupled weight decay (not on biases and LayerNorms)")
      ->capture_default_str();
  cmd.add_option("--adam_beta1", t.adam_beta1, "AdamW beta1")->capture_default_str();
  cmd.add_option("--adam_beta2", t.adam_beta2, "AdamW beta2")->capture_default_str();
  cmd.add_option("--adam_epsilon", t.adam_epsilon, "AdamW epsilon")->capture_default_str();
  cmd.add_option("--max_grad_norm", t.max_grad_norm, "gradient clipping norm; 0 disables")->capture_default_str();
  cmd.add_option("--lr_scheduler_type", t.lr_scheduler_type, "linear, constant, constant_with_warmup, cosine")
      ->capture_default_str();
  cmd.add_option("--warmup_steps", t.warmup_steps, "linear warmup steps")->capture_default_str();
  cmd.add_option("--warmup_ratio", t.warmup_ratio, "warmup as a fraction of the steps (when warmup_steps is 0)")
      ->capture_default_str();
  cmd.add_option("--optim", t.optim,
                 "adamw_torch (adamw_hf is an alias), adafactor, or auto (the planner's choice; the default under "
                 "--max_memory)")
      ->capture_default_str();
  cmd.add_option("--label_smoothing_factor", t.label_smoothing_factor, "label smoothing epsilon")
      ->capture_default_str();
  cmd.add_flag("--gradient_checkpointing", t.gradient_checkpointing,
               "recompute every layer's activations in backward (less memory, ~1/3 more compute)");
  cmd.add_option_function<std::int64_t>(
      "--gradient_checkpointing_layers", [&t](const std::int64_t& n) { t.gradient_checkpointing_layers = n; },
      "with --gradient_checkpointing: only the first N layers of each stack");
  cmd.add_flag("--bf16", t.bf16, "bfloat16 autocast with float32 weights and optimizer");
  cmd.add_flag("--fp16", t.fp16, "refused for PEGASUS (float16 overflows); use --bf16");
  cmd.add_option("--logging_steps", t.logging_steps, "log every N steps (< 1: a fraction of the run)")
      ->capture_default_str();
  cmd.add_option("--eval_strategy,--evaluation_strategy", t.eval_strategy, "no, steps or epoch")->capture_default_str();
  cmd.add_option_function<double>(
      "--eval_steps", [&t](const double& v) { t.eval_steps = v; }, "evaluate every N steps (default: logging_steps)");
  cmd.add_option("--save_strategy", t.save_strategy, "no, steps or epoch")->capture_default_str();
  cmd.add_option("--save_steps", t.save_steps, "checkpoint every N steps (1e6 is fine)")->capture_default_str();
  cmd.add_option_function<std::int64_t>(
      "--save_total_limit", [&t](const std::int64_t& n) { t.save_total_limit = n; },
      "keep only the newest N checkpoints");
  cmd.add_option("--seed", t.seed, "seed of data order, dropout and random init")->capture_default_str();
  cmd.add_flag("--predict_with_generate", t.predict_with_generate,
               "generate at evaluation and report ROUGE next to eval_loss");
  cmd.add_option_function<std::int64_t>(
      "--generation_num_beams", [&t](const std::int64_t& n) { t.generation_num_beams = n; },
      "beams for --predict_with_generate (default: the model's generation config)");
  cmd.add_option_function<std::int64_t>(
      "--generation_max_length", [&t](const std::int64_t& n) { t.generation_max_length = n; },
      "max_length for --predict_with_generate (default: the model's generation config)");
  cmd.add_option("--resume_from_checkpoint", t.resume_from_checkpoint, "a checkpoint folder, or 'latest'");
  // Runtime
  cmd.add_option("--device", o.device, "cpu, cuda or auto")->capture_default_str();
  cmd.add_option("--cuda_alloc_conf", o.cuda_alloc_conf,
                 "CUDA caching-allocator settings, e.g. expandable_segments:True (as PYTORCH_CUDA_ALLOC_CONF)");
  cmd.add_option("--num_threads", o.num_threads, "LibTorch intra-op threads (0: fitsum's default, 1)")
      ->capture_default_str();
  cmd.add_option("--blas_threads", o.blas_threads,
                 "BLAS threads for matrix products (0: fitsum's default, one per core)")
      ->capture_default_str();
  // Memory planning (docs/memory.md)
  cmd.add_option("--max_memory", o.max_memory,
                 "memory budget, e.g. 6GiB or 800MiB, or auto (free memory): plan the fastest configuration that "
                 "fits and enforce the budget");
  cmd.add_flag("--no_resplit", o.no_resplit,
               "keep per_device_train_batch_size and gradient_accumulation_steps as given when planning");
  cmd.add_option("--memory_report", o.memory_report,
                 "with --max_memory: write an SVG of the predicted breakdown per candidate and, after training, the "
                 "measured peak per logged step against the budget");
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
  std::vector<std::string> expanded;
  for (auto it = config.begin(); it != config.end(); ++it) {
    const std::string flag = "--" + it.key();
    if (command.get_option_no_throw(flag) == nullptr) {
      throw std::invalid_argument("'" + first + "': unknown key '" + it.key() + "' (see fitsum " + command.get_name() +
                                  " --help for the names)");
    }
    const auto& value = it.value();
    if (value.is_null()) continue;
    if (value.is_boolean()) {
      expanded.push_back(flag + "=" + (value.get<bool>() ? "true" : "false"));
    } else if (value.is_string()) {
      expanded.push_back(flag);
      expanded.push_back(value.get<std::string>());
    } else if (value.is_number()) {
      expanded.push_back(flag);
      expanded.push_back(value.dump());
    } else {
      throw std::invalid_argument("'" + first + "': key '" + it.key() + "' must be a string, number or boolean");
    }
  }
  expanded.insert(expanded.end(), args.begin() + 1, args.end());
  return expanded;
}

}  // namespace fitsum::cli
