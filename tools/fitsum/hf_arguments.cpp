// Implements tools/fitsum/hf_arguments.h.
#include "hf_arguments.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "argument_text.h"
#include "fitsum/util/python_numbers.h"

namespace fitsum::cli {

namespace {

// integer and number: HF reads the value with Python's int() / float(); a value they refuse is refused here too.
enum class Kind { boolean, value, integer, number, list };

// `accepted`: the values, separated by '|', that mean what fitsum does anyway ("*": every value; "null" also
// matches an empty value, "none" and "null"); numbers compare as numbers, booleans in any of HF's spellings.
struct HfArgument {
  const char* name;
  Kind kind;
  const char* accepted;
  const char* hint;  // why it is not supported and the fitsum way; "" when there is nothing to add
};

constexpr const char* no_hub =
    "fitsum uploads nothing: it writes local folders (copy output_dir, or upload it with `huggingface-cli upload`)";
constexpr const char* one_process = "fitsum trains data-parallel only (torchrun / mpirun / srun with gloo)";
constexpr const char* planner = "the memory planner does this: --max_memory";

// clang-format off
const HfArgument table[] = {
    // run_summarization.py: ModelArguments
    {"use_fast_tokenizer", Kind::boolean, "*", ""},  // fitsum's tokenizer equals the slow (SentencePiece) one
    {"trust_remote_code", Kind::boolean, "false", "fitsum runs no code from a model folder"},
    {"resize_position_embeddings", Kind::boolean, "null|false", "max_source_length is lowered to the model's limit"},
    // DataTrainingArguments
    {"lang", Kind::value, "null", "multilingual tokenizers are not supported"},
    {"dataset_name", Kind::value, "null", "no dataset hub here: pass --train_file / --validation_file (jsonl, json, csv)"},
    {"dataset_config_name", Kind::value, "null", "pass --train_file / --validation_file"},
    {"overwrite_cache", Kind::boolean, "*", ""},  // no dataset cache
    {"preprocessing_num_workers", Kind::integer, "*", ""},
    {"val_max_target_length", Kind::integer, "null", "use --max_target_length and --generation_max_length"},
    {"pad_to_max_length", Kind::boolean, "false", "batches are padded to their longest example; --pad_to_multiple_of"},
    {"ignore_pad_token_for_loss", Kind::boolean, "true", "padding never counts in the loss"},
    {"forced_bos_token", Kind::value, "null", "multilingual models are not supported"},
    // TrainingArguments
    {"do_train", Kind::boolean, "true", "fitsum train always trains; fitsum eval evaluates a model"},
    {"prediction_loss_only", Kind::boolean, "false", "leave out --predict_with_generate instead"},
    {"per_gpu_train_batch_size", Kind::integer, "null", "use --per_device_train_batch_size"},
    {"per_gpu_eval_batch_size", Kind::integer, "null", "use --per_device_eval_batch_size"},
    {"eval_accumulation_steps", Kind::integer, "*", ""},
    {"eval_delay", Kind::number, "0", ""},
    {"torch_empty_cache_steps", Kind::integer, "*", ""},
    {"lr_scheduler_kwargs", Kind::value, "null|{}", "the schedules take no extra arguments"},
    {"log_level", Kind::value, "*", ""},
    {"log_level_replica", Kind::value, "*", ""},
    {"log_on_each_node", Kind::boolean, "*", ""},
    {"logging_nan_inf_filter", Kind::boolean, "true", ""},
    {"save_safetensors", Kind::boolean, "true|null", "fitsum writes model.safetensors"},
    {"save_on_each_node", Kind::boolean, "*", ""},
    {"save_only_model", Kind::boolean, "false", "checkpoints always hold the optimizer and RNG states for exact resume"},
    {"restore_callback_states_from_checkpoint", Kind::boolean, "false", ""},
    {"no_cuda", Kind::boolean, "false", "use --device cpu"},
    {"use_cpu", Kind::boolean, "false", "use --device cpu"},
    {"use_mps_device", Kind::boolean, "false", "fitsum runs on cpu or cuda"},
    {"jit_mode_eval", Kind::boolean, "false", ""},
    {"use_ipex", Kind::boolean, "false", ""},
    {"fp16_opt_level", Kind::value, "*", ""},
    {"half_precision_backend", Kind::value, "auto", ""},
    {"bf16_full_eval", Kind::boolean, "false", "--bf16 also covers evaluation"},
    {"fp16_full_eval", Kind::boolean, "false", "use --bf16"},
    {"tf32", Kind::boolean, "null|false", ""},
    {"local_rank", Kind::integer, "*", ""},  // launchers set LOCAL_RANK; fitsum reads it there
    {"tpu_num_cores", Kind::integer, "null", "fitsum runs on cpu or cuda"},
    {"tpu_metrics_debug", Kind::boolean, "false", "fitsum runs on cpu or cuda"},
    {"debug", Kind::list, "null|", ""},
    {"dataloader_num_workers", Kind::integer, "*", ""},  // data is tokenized up front
    {"dataloader_prefetch_factor", Kind::integer, "*", ""},
    {"past_index", Kind::integer, "-1", ""},
    {"run_name", Kind::value, "*", ""},
    {"remove_unused_columns", Kind::boolean, "*", ""},
    {"label_names", Kind::list, "null", "the labels are the summary column's tokens"},
    {"ignore_data_skip", Kind::boolean, "false", "resuming always continues the data where it stopped"},
    {"fsdp", Kind::list, "null||false", one_process},
    {"fsdp_min_num_params", Kind::integer, "0", one_process},
    {"fsdp_config", Kind::value, "null", one_process},
    {"fsdp_transformer_layer_cls_to_wrap", Kind::value, "null", one_process},
    {"accelerator_config", Kind::value, "null", ""},
    {"deepspeed", Kind::value, "null", planner},
    {"optim_args", Kind::value, "null", "the optimizers take HF's defaults and the flags --adam_beta1 ..."},
    {"adafactor", Kind::boolean, "false", "use --optim adafactor"},
    {"length_column_name", Kind::value, "*", ""},
    {"ddp_find_unused_parameters", Kind::boolean, "*", ""},
    {"ddp_broadcast_buffers", Kind::boolean, "*", ""},
    {"dataloader_persistent_workers", Kind::boolean, "*", ""},
    {"skip_memory_metrics", Kind::boolean, "*", ""},  // fitsum always logs peak memory
    {"use_legacy_prediction_loop", Kind::boolean, "*", ""},
    {"push_to_hub", Kind::boolean, "false", no_hub},
    {"hub_model_id", Kind::value, "*", ""},
    {"hub_strategy", Kind::value, "*", ""},
    {"hub_token", Kind::value, "*", ""},
    {"hub_private_repo", Kind::boolean, "*", ""},
    {"hub_always_push", Kind::boolean, "*", ""},
    {"gradient_checkpointing_kwargs", Kind::value, "*", ""},  // use_reentrant does not change results
    {"include_inputs_for_metrics", Kind::boolean, "false", ""},
    {"include_for_metrics", Kind::list, "null|", ""},
    {"eval_do_concat_batches", Kind::boolean, "*", ""},
    {"fp16_backend", Kind::value, "*", ""},
    {"push_to_hub_model_id", Kind::value, "*", ""},
    {"push_to_hub_organization", Kind::value, "*", ""},
    {"push_to_hub_token", Kind::value, "*", ""},
    {"mp_parameters", Kind::value, "null|", ""},
    {"auto_find_batch_size", Kind::boolean, "false", planner},
    {"full_determinism", Kind::boolean, "*", ""},  // fitsum's runs are deterministic
    {"torchdynamo", Kind::value, "null", "fitsum is compiled C++"},
    {"ray_scope", Kind::value, "*", ""},
    {"torch_compile", Kind::boolean, "false", "fitsum is compiled C++"},
    {"torch_compile_backend", Kind::value, "null", "fitsum is compiled C++"},
    {"torch_compile_mode", Kind::value, "null", "fitsum is compiled C++"},
    {"dispatch_batches", Kind::boolean, "*", ""},
    {"split_batches", Kind::boolean, "*", ""},
    {"include_tokens_per_second", Kind::boolean, "*", ""},  // fitsum always logs tokens_per_second
    {"include_num_input_tokens_seen", Kind::boolean, "false", ""},
    {"neftune_noise_alpha", Kind::number, "null", ""},
    {"optim_target_modules", Kind::list, "null", ""},
    {"batch_eval_metrics", Kind::boolean, "false", ""},
    {"eval_on_start", Kind::boolean, "false", "run fitsum eval on the model first"},
    {"use_liger_kernel", Kind::boolean, "false", ""},
    {"eval_use_gather_object", Kind::boolean, "*", ""},
    {"average_tokens_across_devices", Kind::boolean, "*", ""},
    // Seq2SeqTrainingArguments
    {"sortish_sampler", Kind::boolean, "false", "use --group_by_length"},
    {"generation_config", Kind::value, "null", "the model folder's generation_config.json is read; --generation_num_beams"},
};
// clang-format on

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

bool same_number(const std::string& a, const std::string& b) {
  try {
    return util::parse_python_float(a) == util::parse_python_float(b);
  } catch (const std::invalid_argument&) {
    return false;
  }
}

bool is_null_word(const std::string& normalized) {
  return normalized.empty() || normalized == "none" || normalized == "null";
}

// An integer or number argument's value that Python's int() / float() refuses, as HF's parser refuses it.
void check_number_syntax(const HfArgument& argument, const std::string& value) {
  if (is_null_word(lower(value))) return;  // matches() decides whether the argument may be left unset
  try {
    if (argument.kind == Kind::integer) (void)util::parse_python_int(value);
    if (argument.kind == Kind::number) (void)util::parse_python_float(value);
  } catch (const std::invalid_argument& e) {
    throw UsageError("--" + std::string(argument.name) + ": " + e.what());
  }
}

bool matches(const HfArgument& argument, const std::string& value) {
  std::string normalized = lower(value);
  if (argument.kind == Kind::boolean && normalized != "null" && normalized != "none") {
    normalized = parse_boolean_word(value, std::string("--") + argument.name) ? "true" : "false";
  }
  std::stringstream accepted(argument.accepted);
  std::string option;
  while (std::getline(accepted, option, '|')) {
    if (option == "*" || option == normalized || same_number(option, normalized)) return true;
    if (option == "null" && is_null_word(normalized)) return true;
  }
  // A trailing '|' accepts the empty value.
  const std::string all = argument.accepted;
  return normalized.empty() && !all.empty() && all.back() == '|';
}

void check(const HfArgument& argument, const CLI::results_t& results) {
  std::vector<std::string> values = results;
  if (values.empty()) values.push_back(argument.kind == Kind::boolean ? "true" : "");
  for (auto& value : values) {
    if (argument.kind == Kind::boolean && value.empty()) value = "true";  // a bare --flag
    check_number_syntax(argument, value);
    if (matches(argument, value)) continue;
    std::string message =
        "--" + std::string(argument.name) + (value.empty() ? "" : " " + value) + " is not supported by fitsum";
    if (*argument.hint != '\0') message += ": " + std::string(argument.hint);
    throw UsageError(message);
  }
}

}  // namespace

void add_hf_compatibility_arguments(CLI::App& command) {
  for (const HfArgument& argument : table) {
    auto* option = command.add_option(
        "--" + std::string(argument.name),
        [&argument](const CLI::results_t& results) {
          check(argument, results);
          return true;
        },
        "Hugging Face argument (accepted where it means what fitsum does)");
    option->group("");  // hidden from --help
    if (argument.kind == Kind::boolean) option->expected(0, 1);
    if (argument.kind == Kind::list) option->expected(1, CLI::detail::expected_max_vector_size)->allow_extra_args(true);
  }
}

std::vector<std::string> hf_compatibility_argument_names() {
  std::vector<std::string> names;
  for (const HfArgument& argument : table) names.emplace_back(argument.name);
  return names;
}

}  // namespace fitsum::cli
