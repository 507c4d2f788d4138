// `fitsum train` as users run it, checked against the reference trajectories and against itself: exact gradient
// accumulation, checkpointing that changes nothing but memory, and resumes (after SIGKILL and SIGTERM) that end
// with the weights of an uninterrupted run.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fitsum/io/safetensors.h"
#include "fitsum/util/files.h"
#include "fixture_support.h"
#include "saved_runs.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

fs::path fixture_dir() { return shared_dir() / "fixtures" / "tiny-pegasus"; }

// case.json's two records as a pre-tokenized jsonl (no padding).
fs::path write_case_jsonl(const fs::path& dir) {
  const auto c = util::read_json_file(fixture_dir() / "case.json");
  std::ofstream out(dir / "case.jsonl");
  for (std::size_t i = 0; i < c["input_ids"].size(); ++i) {
    nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
    for (std::size_t j = 0; j < c["input_ids"][i].size(); ++j) {
      if (c["attention_mask"][i][j] == 1) ids.push_back(c["input_ids"][i][j]);
    }
    for (const auto& l : c["labels"][i]) {
      if (l != -100) labels.push_back(l);
    }
    out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
  }
  return dir / "case.jsonl";
}

// Eight copy-task records of different lengths (ids within the tiny vocabulary, eos last).
fs::path write_eight_records(const fs::path& dir) {
  std::ofstream out(dir / "eight.jsonl");
  for (int i = 0; i < 8; ++i) {
    nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
    const int length = 3 + (i * 5) % 9;
    for (int j = 0; j < length; ++j) ids.push_back(103 + (i * 13 + j * 7) % 64);
    ids.push_back(1);
    for (int j = 0; j < 2 + (i * 3) % 6; ++j) labels.push_back(103 + (i * 11 + j * 5) % 64);
    labels.push_back(1);
    out << nlohmann::json{{"id", std::to_string(i)}, {"input_ids", ids}, {"labels", labels}}.dump() << "\n";
  }
  return dir / "eight.jsonl";
}

std::string fitsum() { return fitsum_binary().string(); }

std::string base_args(const fs::path& data, const fs::path& out) {
  return fitsum() + " train --model_name_or_path '" + fixture_dir().string() + "' --train_file '" + data.string() +
         "' --output_dir '" + out.string() + "' ";
}

class TrainFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainFixture, ReproducesReferenceTrajectory) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("fixture");
  const auto data = write_case_jsonl(dir);
  const bool adafactor = GetParam() == "adafactor";
  const auto out = dir / "out";
  // The reference looks embeddings up without padding_idx (tests/data/make_hf_padding_case.py): say so.
  const auto r = run_command(base_args(data, out) + "--config_overrides embedding_padding_idx=none --optim " +
                             (adafactor ? "adafactor" : "adamw_torch") +
                             " --learning_rate 1e-3 --weight_decay 0.01 --lr_scheduler_type constant "
                             "--warmup_steps 0 --max_grad_norm 0 --per_device_train_batch_size 2 --max_steps 3 "
                             "--logging_steps 1 --save_strategy no");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto expected = util::read_json_file(fixture_dir() / "case.json")[adafactor ? "adafactor" : "adamw"];
  const auto history = log_history(out);
  for (int i = 0; i < 3; ++i) {
    const double want = expected["losses_before_each_step"][i];
    EXPECT_EQ(history[i]["step"], i + 1);
    EXPECT_CLOSE(history[i]["loss"].get<double>(), want, relative(i == 0 ? 1e-5 : 1e-4)) << "step " << i + 1;
  }
  const auto w = saved_weights(out);
  for (const auto& item : expected["params_after_3_steps"].items()) {
    const auto& tensor = w.at(item.key());
    expect_samples_near(tensor, item.value(), rms_tolerance(item.value(), tensor.numel()), item.key());
  }
  // An HF-loadable folder with the trainer's state.
  EXPECT_TRUE(fs::exists(out / "config.json"));
  EXPECT_TRUE(fs::exists(out / "generation_config.json"));
  const auto state = util::read_json_file(out / "trainer_state.json");
  EXPECT_EQ(state["global_step"], 3);
  EXPECT_EQ(state["max_steps"], 3);
  const auto& last = state["log_history"].back();
  EXPECT_TRUE(last.contains("train_runtime"));
  EXPECT_TRUE(last.contains("train_samples_per_second"));
  EXPECT_TRUE(last.contains("train_tokens_per_second"));
  EXPECT_CLOSE(
      last["train_loss"].get<double>(),
      (history[0]["loss"].get<double>() + history[1]["loss"].get<double>() + history[2]["loss"].get<double>()) / 3,
      relative(1e-10));
  EXPECT_GT(history[0]["peak_memory_bytes"].get<std::int64_t>(), 0);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, TrainFixture, ::testing::Values("adafactor", "adamw_torch"));

TEST(Train, GradientAccumulationIsExact) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("accumulation");
  const auto data = write_eight_records(dir);
  for (const auto& [micro, accumulation] : std::vector<std::pair<int, int>>{{4, 1}, {2, 2}, {1, 4}}) {
    const auto out = dir / ("out-" + std::to_string(micro));
    const auto r =
        run_command(base_args(data, out) +
                    "--optim adafactor --learning_rate 1e-3 --max_steps 4 "
                    "--logging_steps 1 --save_strategy no --per_device_train_batch_size " +
                    std::to_string(micro) + " --gradient_accumulation_steps " + std::to_string(accumulation));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  expect_same_weights(dir / "out-4", dir / "out-2", 1e-5);
  expect_same_weights(dir / "out-4", dir / "out-1", 1e-5);
  const auto a = log_history(dir / "out-4"), b = log_history(dir / "out-1");
  for (int i = 0; i < 4; ++i) {
    EXPECT_CLOSE(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(), relative(1e-5));
  }
}

TEST(Train, GradientCheckpointingChangesMemoryNotResults) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("checkpointing");
  const auto data = write_eight_records(dir);
  const std::string common =
      "--config_overrides dropout=0.1,attention_dropout=0.1,activation_dropout=0.1 "
      "--optim adamw_torch --learning_rate 1e-3 --max_steps 4 --logging_steps 1 "
      "--save_strategy no --per_device_train_batch_size 4 --seed 11 ";
  auto r = run_command(base_args(data, dir / "plain") + common);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(base_args(data, dir / "ckpt") + common + "--gradient_checkpointing");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_weights(dir / "plain", dir / "ckpt", 1e-6);
  const auto plain = log_history(dir / "plain"), ckpt = log_history(dir / "ckpt");
  for (int i = 0; i < 4; ++i) {
    EXPECT_CLOSE(ckpt[i]["loss"].get<double>(), plain[i]["loss"].get<double>(), relative(1e-6)) << "step " << i + 1;
  }
  // Dropout was on: without it the losses differ.
  r = run_command(base_args(data, dir / "nodrop") +
                  "--optim adamw_torch --learning_rate 1e-3 --max_steps 1 "
                  "--save_strategy no --per_device_train_batch_size 4 --seed 11 --logging_steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(log_history(dir / "nodrop")[0]["loss"], plain[0]["loss"]);
}

TEST(Train, GradientCheckpointingLowersMeasuredPeakMemory) {
  // Long sequences on a small random model, so that activations dominate the peak.
  const auto dir = temp_dir("checkpointing-memory");
  {
    std::ofstream out(dir / "long.jsonl");
    for (int i = 0; i < 4; ++i) {
      nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
      for (int j = 0; j < 255; ++j) ids.push_back(103 + (i * 31 + j * 17) % 1800);
      ids.push_back(1);
      for (int j = 0; j < 63; ++j) labels.push_back(103 + (i * 7 + j * 13) % 1800);
      labels.push_back(1);
      out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
    }
  }
  std::map<std::string, std::int64_t> peak;
  for (const std::string variant : {"plain", "ckpt"}) {
    const auto r =
        run_command(fitsum() + " train --config_name '" + (source_dir() / "configs" / "pegasus-tiny").string() +
                    "' --config_overrides vocab_size=2000 --train_file '" + (dir / "long.jsonl").string() +
                    "' --output_dir '" + (dir / variant).string() +
                    "' --optim adafactor --max_steps 2 --logging_steps 1 --save_strategy no "
                    "--per_device_train_batch_size 4" +
                    (variant == "ckpt" ? " --gradient_checkpointing" : ""));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    peak[variant] = log_history(dir / variant)[1]["peak_memory_bytes"].get<std::int64_t>();
  }
  EXPECT_LT(peak["ckpt"], peak["plain"] * 0.8) << "plain " << peak["plain"] << ", checkpointed " << peak["ckpt"];
  RecordProperty("peak_plain_bytes", std::to_string(peak["plain"]));
  RecordProperty("peak_checkpointed_bytes", std::to_string(peak["ckpt"]));
}

// Starts `command` in the background, waits for `ready` to exist, sends `signal_number`; returns the exit status.
int run_and_signal(const std::string& command, const fs::path& ready, int signal_number) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + command + " > /dev/null 2>&1").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(ready) && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, signal_number);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class Resume : public ::testing::TestWithParam<int> {};

TEST_P(Resume, EndsWithTheWeightsOfAnUninterruptedRun) {
  FITSUM_REQUIRE_SHARED();
  const int signal_number = GetParam();
  const auto dir = temp_dir("resume-" + std::to_string(signal_number));
  const auto data = write_eight_records(dir);
  const std::string common =
      "--config_overrides dropout=0.1,attention_dropout=0.1,activation_dropout=0.1 "
      "--optim adafactor --learning_rate 1e-3 --max_steps 120 --logging_steps 5 "
      "--save_steps 10 --per_device_train_batch_size 2 --gradient_accumulation_steps 2 "
      "--warmup_steps 10 --seed 5 ";
  auto r = run_command(base_args(data, dir / "whole") + common);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const auto out = dir / "interrupted";
  const int status = run_and_signal(base_args(data, out) + common, out / "checkpoint-20", signal_number);
  if (signal_number == SIGKILL) {
    EXPECT_EQ(status, 128 + SIGKILL);
  } else {
    EXPECT_EQ(status, 143);  // saved a checkpoint of the last completed step, then exited
  }
  ASSERT_TRUE(fs::exists(out / "checkpoint-20"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors")) << "the run finished before the signal; make it longer";
  r = run_command(base_args(data, out) + common + "--resume_from_checkpoint latest");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  expect_same_weights(dir / "whole", out, 1e-7);
  // The log after the resume continues the uninterrupted one.
  const auto a = log_history(dir / "whole"), b = log_history(out);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i + 1 < a.size(); ++i) {
    EXPECT_EQ(a[i]["step"], b[i]["step"]);
    EXPECT_DOUBLE_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "entry " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Signals, Resume, ::testing::Values(SIGKILL, SIGTERM));

TEST(Train, CheckpointsAreCompleteAndPruned) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("checkpoints");
  const auto data = write_eight_records(dir);
  const auto out = dir / "out";
  const auto r = run_command(base_args(data, out) +
                             "--optim adafactor --max_steps 6 --save_steps 2 "
                             "--save_total_limit 2 --per_device_train_batch_size 4 --logging_steps 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(out / "checkpoint-2"));
  for (const char* name : {"checkpoint-4", "checkpoint-6"}) {
    for (const char* file : {"model.safetensors", "config.json", "optimizer.safetensors", "rng_state.safetensors",
                             "scheduler.json", "trainer_state.json", "fitsum_state.json", "training_args.json"}) {
      EXPECT_TRUE(fs::exists(out / name / file)) << name << "/" << file;
    }
  }
  EXPECT_EQ(util::read_json_file(out / "checkpoint-4" / "trainer_state.json")["global_step"], 4);
}

TEST(Train, ArgumentsFromJsonFileAndFlagsOverrideIt) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("json-args");
  const auto data = write_eight_records(dir);
  nlohmann::json args = {{"model_name_or_path", fixture_dir().string()},
                         {"train_file", data.string()},
                         {"output_dir", (dir / "out").string()},
                         {"optim", "adafactor"},
                         {"max_steps", 2},
                         {"per_device_train_batch_size", 1},
                         {"gradient_accumulation_steps", 64},
                         {"save_steps", 1e6},
                         {"gradient_checkpointing", true},
                         {"evaluation_strategy", "no"},
                         {"logging_steps", 10}};
  util::write_json_file_atomic(dir / "args.json", args);
  auto r = run_command(fitsum() + " train '" + (dir / "args.json").string() + "' --gradient_accumulation_steps 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto training_args = util::read_json_file(dir / "out" / "training_args.json");
  EXPECT_EQ(training_args["gradient_accumulation_steps"], 2);  // the flag won
  EXPECT_EQ(training_args["optim"], "adafactor");              // from the file
  EXPECT_EQ(training_args["gradient_checkpointing"], true);
  EXPECT_NE(r.output.find("resolved configuration"), std::string::npos);

  args["no_such_argument"] = 1;
  util::write_json_file_atomic(dir / "bad.json", args);
  r = run_command(fitsum() + " train '" + (dir / "bad.json").string() + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown key 'no_such_argument'"), std::string::npos) << r.output;
}

TEST(Train, PredictWithGenerateAddsRougeToEvaluation) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("predict-with-generate");
  const auto samsum = source_dir() / "data" / "samsum";
  const auto r =
      run_command(fitsum() + " train --model_name_or_path '" + (shared_dir() / "data" / "pegasus-tiny").string() +
                  "' --train_file '" + (samsum / "train.jsonl").string() + "' --validation_file '" +
                  (samsum / "validation.jsonl").string() + "' --output_dir '" + (dir / "out").string() +
                  "' --max_train_samples 8 --max_eval_samples 4 --max_source_length 64 "
                  "--max_target_length 16 --per_device_train_batch_size 4 --max_steps 2 "
                  "--evaluation_strategy steps --eval_steps 2 --predict_with_generate "
                  "--generation_num_beams 2 --generation_max_length 40 --save_strategy no");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto history = log_history(dir / "out");
  nlohmann::json eval_entry;
  for (const auto& e : history) {
    if (e.contains("eval_loss")) eval_entry = e;
  }
  ASSERT_FALSE(eval_entry.is_null()) << history.dump();
  for (const char* key : {"eval_rouge1", "eval_rouge2", "eval_rougeL", "eval_rougeLsum", "eval_gen_len"}) {
    EXPECT_TRUE(eval_entry.contains(key)) << key;
  }
  EXPECT_LE(eval_entry["eval_gen_len"].get<double>(), 39.0);  // at most max_length - 1 tokens after the start token
  EXPECT_GE(eval_entry["eval_gen_len"].get<double>(), 31.0);  // the model's generation config: min_length 32
  EXPECT_EQ(eval_entry["step"], 2);
  // The tokenizer travels with the saved model.
  EXPECT_TRUE(fs::exists(dir / "out" / "spiece.model"));
}

TEST(Train, Bf16AutocastKeepsFloat32WeightsAndTracksFloat32Loss) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("bf16");
  const auto data = write_case_jsonl(dir);
  const std::string common =
      "--optim adafactor --learning_rate 1e-3 --lr_scheduler_type constant --max_steps 2 "
      "--logging_steps 1 --save_strategy no --per_device_train_batch_size 2 ";
  auto r = run_command(base_args(data, dir / "fp32") + common);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(base_args(data, dir / "bf16") + common + "--bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto a = log_history(dir / "fp32"), b = log_history(dir / "bf16");
  for (int i = 0; i < 2; ++i) {
    const double fp32 = a[i]["loss"].get<double>(), bf16 = b[i]["loss"].get<double>();
    EXPECT_NE(fp32, bf16);                     // autocast really ran the products in bfloat16
    EXPECT_CLOSE(bf16, fp32, relative(0.01));  // bfloat16 has 8 bits of mantissa: about 2-3 digits
  }
  io::SafetensorsReader saved(dir / "bf16" / "model.safetensors");
  EXPECT_EQ(saved.entry("model.shared.weight").dtype, "F32");  // master weights stay float32
}

TEST(Train, RefusesWhatItCannotDoWithAReason) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("refusals");
  const auto data = write_eight_records(dir);
  auto r = run_command(base_args(data, dir / "a") + "--fp16 --max_steps 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("overflow"), std::string::npos) << r.output;
  r = run_command(base_args(data, dir / "b") + "--optim sgd --max_steps 1");
  EXPECT_NE(r.output.find("optim 'sgd'"), std::string::npos) << r.output;
  r = run_command(base_args(data, dir / "c") + "--max_steps 1 --save_strategy no");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(base_args(data, dir / "c") + "--max_steps 1 --save_strategy no");
  EXPECT_NE(r.output.find("overwrite_output_dir"), std::string::npos) << r.output;
}

// HF's dataloader_drop_last: 8 examples in batches of 3 make 3 steps an epoch, or 2 with the short batch left out;
// a batch larger than the data leaves nothing to train on, which is refused before any step.
TEST(Train, DataloaderDropLastLeavesOutTheIncompleteBatch) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("drop-last");
  const auto data = write_eight_records(dir);
  const std::string common = "--num_train_epochs 2 --per_device_train_batch_size 3 --save_strategy no ";
  auto r = run_command(base_args(data, dir / "kept") + common);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(util::read_json_file(dir / "kept" / "trainer_state.json")["global_step"], 6);
  r = run_command(base_args(data, dir / "dropped") + common + "--dataloader_drop_last");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto state = util::read_json_file(dir / "dropped" / "trainer_state.json");
  EXPECT_EQ(state["global_step"], 4);
  EXPECT_EQ(util::read_json_file(dir / "dropped" / "training_args.json")["dataloader_drop_last"], true);
  r = run_command(base_args(data, dir / "none") + "--per_device_train_batch_size 9 --dataloader_drop_last true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("8 training examples make no batch of per_device_train_batch_size 9 with "
                          "dataloader_drop_last"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace fitsum::test
