// The command line as Hugging Face users write it: every argument name of transformers' Seq2SeqTrainingArguments and
// of run_summarization.py is known, HF's boolean spellings and dashed names work, values fitsum cannot honour are
// refused by name, typos get the nearest name, and usage errors exit 2.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

// The fields of Seq2SeqTrainingArguments in transformers 4.47.1 (dataclasses.fields, init fields only).
const char* const training_arguments[] = {
    "output_dir",
    "overwrite_output_dir",
    "do_train",
    "do_eval",
    "do_predict",
    "eval_strategy",
    "prediction_loss_only",
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "per_gpu_train_batch_size",
    "per_gpu_eval_batch_size",
    "gradient_accumulation_steps",
    "eval_accumulation_steps",
    "eval_delay",
    "torch_empty_cache_steps",
    "learning_rate",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "num_train_epochs",
    "max_steps",
    "lr_scheduler_type",
    "lr_scheduler_kwargs",
    "warmup_ratio",
    "warmup_steps",
    "log_level",
    "log_level_replica",
    "log_on_each_node",
    "logging_dir",
    "logging_strategy",
    "logging_first_step",
    "logging_steps",
    "logging_nan_inf_filter",
    "save_strategy",
    "save_steps",
    "save_total_limit",
    "save_safetensors",
    "save_on_each_node",
    "save_only_model",
    "restore_callback_states_from_checkpoint",
    "no_cuda",
    "use_cpu",
    "use_mps_device",
    "seed",
    "data_seed",
    "jit_mode_eval",
    "use_ipex",
    "bf16",
    "fp16",
    "fp16_opt_level",
    "half_precision_backend",
    "bf16_full_eval",
    "fp16_full_eval",
    "tf32",
    "local_rank",
    "ddp_backend",
    "tpu_num_cores",
    "tpu_metrics_debug",
    "debug",
    "dataloader_drop_last",
    "eval_steps",
    "dataloader_num_workers",
    "dataloader_prefetch_factor",
    "past_index",
    "run_name",
    "disable_tqdm",
    "remove_unused_columns",
    "label_names",
    "load_best_model_at_end",
    "metric_for_best_model",
    "greater_is_better",
    "ignore_data_skip",
    "fsdp",
    "fsdp_min_num_params",
    "fsdp_config",
    "fsdp_transformer_layer_cls_to_wrap",
    "accelerator_config",
    "deepspeed",
    "label_smoothing_factor",
    "optim",
    "optim_args",
    "adafactor",
    "group_by_length",
    "length_column_name",
    "report_to",
    "ddp_find_unused_parameters",
    "ddp_bucket_cap_mb",
    "ddp_broadcast_buffers",
    "dataloader_pin_memory",
    "dataloader_persistent_workers",
    "skip_memory_metrics",
    "use_legacy_prediction_loop",
    "push_to_hub",
    "resume_from_checkpoint",
    "hub_model_id",
    "hub_strategy",
    "hub_token",
    "hub_private_repo",
    "hub_always_push",
    "gradient_checkpointing",
    "gradient_checkpointing_kwargs",
    "include_inputs_for_metrics",
    "include_for_metrics",
    "eval_do_concat_batches",
    "fp16_backend",
    "evaluation_strategy",
    "push_to_hub_model_id",
    "push_to_hub_organization",
    "push_to_hub_token",
    "mp_parameters",
    "auto_find_batch_size",
    "full_determinism",
    "torchdynamo",
    "ray_scope",
    "ddp_timeout",
    "torch_compile",
    "torch_compile_backend",
    "torch_compile_mode",
    "dispatch_batches",
    "split_batches",
    "include_tokens_per_second",
    "include_num_input_tokens_seen",
    "neftune_noise_alpha",
    "optim_target_modules",
    "batch_eval_metrics",
    "eval_on_start",
    "use_liger_kernel",
    "eval_use_gather_object",
    "average_tokens_across_devices",
    "sortish_sampler",
    "predict_with_generate",
    "generation_max_length",
    "generation_num_beams",
    "generation_config",
};
// run_summarization.py's ModelArguments and DataTrainingArguments.
const char* const script_arguments[] = {
    "model_name_or_path",
    "config_name",
    "tokenizer_name",
    "cache_dir",
    "use_fast_tokenizer",
    "model_revision",
    "token",
    "trust_remote_code",
    "resize_position_embeddings",
    "lang",
    "dataset_name",
    "dataset_config_name",
    "text_column",
    "summary_column",
    "train_file",
    "validation_file",
    "test_file",
    "overwrite_cache",
    "preprocessing_num_workers",
    "max_source_length",
    "max_target_length",
    "val_max_target_length",
    "pad_to_max_length",
    "max_train_samples",
    "max_eval_samples",
    "max_predict_samples",
    "num_beams",
    "ignore_pad_token_for_loss",
    "source_prefix",
    "forced_bos_token",
};

std::string fitsum() { return fitsum_binary().string(); }
fs::path fixture_dir() { return shared_dir() / "fixtures" / "tiny-pegasus"; }

// Four copy-task records (ids within the tiny vocabulary, eos last).
fs::path write_records(const fs::path& dir) {
  std::ofstream out(dir / "records.jsonl");
  for (int i = 0; i < 4; ++i) {
    nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
    for (int j = 0; j < 3 + i; ++j) ids.push_back(103 + (i * 13 + j * 7) % 64);
    ids.push_back(1);
    for (int j = 0; j < 2 + i; ++j) labels.push_back(103 + (i * 11 + j * 5) % 64);
    labels.push_back(1);
    out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
  }
  return dir / "records.jsonl";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(HfArguments, EveryNameOfTheHfParsersIsKnown) {
  const auto dir = temp_dir("hf-names");
  nlohmann::json all = nlohmann::json::object();
  for (const char* name : training_arguments) all[name] = nullptr;  // null: HF's default, after the name is checked
  for (const char* name : script_arguments) all[name] = nullptr;
  util::write_json_file_atomic(dir / "all.json", all);
  const auto r = run_command(fitsum() + " train '" + (dir / "all.json").string() + "'");
  EXPECT_FALSE(contains(r.output, "unknown")) << r.output;
  EXPECT_TRUE(contains(r.output, "output_dir is required")) << r.output;  // got past every name
}

TEST(HfArguments, TheSeedRecipeAsJsonTrains) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("hf-recipe");
  // TrainingArguments(...) of the recipe this tool exists for, plus what HF users add around it.
  const nlohmann::json recipe = {{"output_dir", (dir / "out").string()},
                                 {"num_train_epochs", 1},
                                 {"warmup_steps", 500},
                                 {"per_device_train_batch_size", 1},
                                 {"per_device_eval_batch_size", 1},
                                 {"weight_decay", 0.01},
                                 {"logging_steps", 10},
                                 {"push_to_hub", false},
                                 {"evaluation_strategy", "steps"},
                                 {"eval_steps", 500},
                                 {"save_steps", 1e6},
                                 {"optim", "adafactor"},
                                 {"gradient_checkpointing", true},
                                 {"gradient_accumulation_steps", 2},
                                 {"report_to", {"none"}},
                                 {"logging_dir", (dir / "runs").string()},
                                 {"do_train", true},
                                 {"do_eval", false},
                                 {"lr_scheduler_kwargs", nlohmann::json::object()},
                                 {"disable_tqdm", "True"},
                                 {"data_seed", 7},
                                 {"logging_first_step", true}};
  util::write_json_file_atomic(dir / "recipe.json", recipe);
  const auto r = run_command(fitsum() + " train '" + (dir / "recipe.json").string() + "' --model_name_or_path '" +
                             fixture_dir().string() + "' --train_file '" + write_records(dir).string() +
                             "' --validation_file '" + (dir / "records.jsonl").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto args = util::read_json_file(dir / "out" / "training_args.json");
  EXPECT_EQ(args["data_seed"], 7);
  EXPECT_EQ(args["gradient_checkpointing"], true);
  const auto history = util::read_json_file(dir / "out" / "trainer_state.json")["log_history"];
  ASSERT_FALSE(history.empty());
  EXPECT_EQ(history[0]["step"], 1);  // logging_first_step, although logging_steps is 10
  EXPECT_TRUE(history[0].contains("loss"));
}

TEST(HfArguments, BooleanWordsAndDashedNamesAsHfParsesThem) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("hf-words");
  const auto r = run_command(fitsum() + " train --model_name_or_path '" + fixture_dir().string() + "' --train_file '" +
                             write_records(dir).string() + "' --output-dir '" + (dir / "out").string() +
                             "' --max-steps 1 --learning-rate 1e-3 --gradient_checkpointing True --bf16 false "
                             "--predict_with_generate 0 --push_to_hub False --report_to none --do_train --optim "
                             "adafactor --per_device_train_batch_size=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto args = util::read_json_file(dir / "out" / "training_args.json");
  EXPECT_EQ(args["gradient_checkpointing"], true);
  EXPECT_EQ(args["bf16"], false);
  EXPECT_EQ(args["predict_with_generate"], false);
  EXPECT_DOUBLE_EQ(args["learning_rate"].get<double>(), 1e-3);
  EXPECT_EQ(args["per_device_train_batch_size"], 2);
}

TEST(HfArguments, ValuesFitsumCannotHonourAreRefusedByName) {
  struct Case {
    std::string flags, says;
  };
  for (const Case& c : {Case{"--push_to_hub True", "copy output_dir"}, Case{"--push_to_hub", "copy output_dir"},
                        Case{"--deepspeed ds.json", "--max_memory"}, Case{"--torch_compile", "compiled C++"},
                        Case{"--dataset_name samsum", "--train_file"}, Case{"--adafactor true", "--optim adafactor"},
                        Case{"--report_to wandb", "trainer_state.json"}}) {
    const auto r = run_command(fitsum() + " train --output_dir /nonexistent/x " + c.flags);
    EXPECT_EQ(r.exit_code, 2) << c.flags << ": " << r.output;
    EXPECT_TRUE(contains(r.output, "is not supported by fitsum")) << c.flags << ": " << r.output;
    EXPECT_TRUE(contains(r.output, c.says)) << c.flags << ": " << r.output;
  }
}

TEST(HfArguments, TyposGetTheNearestNameAndUsageErrorsExit2) {
  const auto dir = temp_dir("hf-typos");
  auto r = run_command(fitsum() + " train --per_device_train_batchsize 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "did you mean --per_device_train_batch_size?")) << r.output;
  r = run_command(fitsum() + " trian --max_steps 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "did you mean 'train'?")) << r.output;
  r = run_command(fitsum() + " train --max_steps many");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_command(fitsum() + " train --gradient_checkpointing maybe --output_dir x");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  util::write_json_file_atomic(dir / "typo.json", nlohmann::json{{"learning_rat", 1e-4}});
  r = run_command(fitsum() + " train '" + (dir / "typo.json").string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "did you mean 'learning_rate'?")) << r.output;
}

TEST(HfArguments, BothStrategySpellingsMustAgree) {
  const auto dir = temp_dir("hf-strategy");
  util::write_json_file_atomic(dir / "both.json",
                               nlohmann::json{{"eval_strategy", "steps"}, {"evaluation_strategy", "no"}});
  const auto r = run_command(fitsum() + " train '" + (dir / "both.json").string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "disagree")) << r.output;
}

TEST(HfArguments, ProgressOnStderrFromTheFirstMicroBatchAndDisableTqdm) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("hf-progress");
  const auto records = write_records(dir);
  const std::string run = fitsum() + " train --model_name_or_path '" + fixture_dir().string() + "' --train_file '" +
                          records.string() + "' --validation_file '" + records.string() +
                          "' --max_steps 2 --per_device_train_batch_size 1 --gradient_accumulation_steps 2 "
                          "--eval_strategy steps --eval_steps 1 --per_device_eval_batch_size 2 --output_dir '";
  // stderr alone, through a pipe (`| cat`: the exit status is cat's, so the files are checked too): plain lines,
  // never the same twice.
  auto r = run_command(run + (dir / "a").string() + "' 2>&1 >/dev/null | cat");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "train   0%|                    | 0/2 [00:00<?, ?it/s, micro-batch 1/2]")) << r.output;
  EXPECT_TRUE(contains(r.output, "| 1/2 [")) << r.output;
  EXPECT_TRUE(contains(r.output, "loss=")) << r.output;
  EXPECT_TRUE(contains(r.output, "eval (eval loss) 100%|####################| 2/2 [")) << r.output;
  EXPECT_FALSE(contains(r.output, "\r")) << "no terminal control characters in a pipe";
  EXPECT_TRUE(fs::exists(dir / "a" / "model.safetensors"));
  r = run_command(run + (dir / "b").string() + "' --disable_tqdm 2>&1 >/dev/null | cat");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "train ")) << r.output;
  EXPECT_FALSE(contains(r.output, "eval (")) << r.output;
  EXPECT_TRUE(fs::exists(dir / "b" / "model.safetensors"));
}

}  // namespace
}  // namespace fitsum::test
