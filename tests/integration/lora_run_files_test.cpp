// What a LoRA run writes and reads back: output_dir and every checkpoint-N hold the adapter as PEFT saves it (no
// model.safetensors), the optimizer state holds the adapter's tensors only, a resumed run ends with the very adapter
// of an uninterrupted one, and --adapter_name_or_path continues a PEFT-written adapter.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/io/safetensors.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

fs::path fixture(const std::string& name) { return source_dir() / "tests" / "data" / "fixtures" / name; }
std::string in_quotes(const fs::path& p) { return "'" + p.string() + "'"; }

const std::string kLora =
    " --lora_r 4 --lora_alpha 8 --lora_target_modules q_proj,v_proj --lora_dropout 0.1 --optim adamw_torch "
    "--learning_rate 1e-2 --per_device_train_batch_size 2 --logging_steps 1 --seed 3 --max_steps 6 --save_steps 2 ";

CommandResult train(const fs::path& data, const fs::path& out, const std::string& flags) {
  return run_command(fitsum_binary().string() + " train --model_name_or_path " + in_quotes(fixture("tiny-bart")) +
                     " --train_file " + in_quotes(data) + " --output_dir " + in_quotes(out) + " " + flags + " 2>&1");
}

// name -> tensor of a safetensors file.
std::map<std::string, at::Tensor> tensors_of(const fs::path& file) {
  io::SafetensorsReader reader(file);
  std::map<std::string, at::Tensor> out;
  for (const auto& e : reader.entries()) out[e.name] = reader.read(e.name);
  return out;
}

void expect_equal_tensors(const fs::path& a, const fs::path& b) {
  const auto x = tensors_of(a), y = tensors_of(b);
  ASSERT_EQ(x.size(), y.size());
  for (const auto& [name, tensor] : x) {
    ASSERT_TRUE(y.count(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, y.at(name))) << name;
  }
}

TEST(LoraRun, FoldersHoldTheAdapterAndItsOptimizerStateOnly) {
  const auto dir = temp_dir("lora-run");
  const auto data = write_copy_task_records(dir / "copy.jsonl");
  const auto out = dir / "out";
  const auto r = train(data, out, kLora);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const auto& folder : {out, out / "checkpoint-2", out / "checkpoint-6"}) {
    SCOPED_TRACE(folder.string());
    for (const char* file : {"adapter_config.json", "adapter_model.safetensors", "vocab.json", "merges.txt",
                             "tokenizer.json", "trainer_state.json", "training_args.json"}) {
      EXPECT_TRUE(fs::is_regular_file(folder / file)) << file;
    }
    for (const char* file : {"model.safetensors", "config.json", "pytorch_model.bin"}) {
      EXPECT_FALSE(fs::exists(folder / file)) << file;
    }
    const auto config = util::read_json_file(folder / "adapter_config.json");
    EXPECT_EQ(config["base_model_name_or_path"], fixture("tiny-bart").string());
    EXPECT_EQ(config["r"], 4);
    EXPECT_EQ(config["target_modules"], nlohmann::json({"q_proj", "v_proj"}));
    EXPECT_EQ(config["peft_type"], "LORA");
    const auto adapter = tensors_of(folder / "adapter_model.safetensors");
    EXPECT_EQ(adapter.size(), 24u);  // q_proj and v_proj of 2 encoder self-attentions, 2 + 2 decoder attentions
    const auto b = adapter.at("base_model.model.model.encoder.layers.0.self_attn.q_proj.lora_B.weight");
    EXPECT_GT(b.abs().max().item<double>(), 0.0);  // trained away from PEFT's zero start
  }
  for (const char* file : {"optimizer.safetensors", "scheduler.json", "rng_state.safetensors", "fitsum_state.json"}) {
    EXPECT_TRUE(fs::is_regular_file(out / "checkpoint-2" / file)) << file;
  }
  const auto state = tensors_of(out / "checkpoint-2" / "optimizer.safetensors");
  EXPECT_EQ(state.size(), 72u);  // step, exp_avg and exp_avg_sq of the 24 adapter tensors, nothing of the frozen base
  for (const auto& [name, tensor] : state) {
    EXPECT_TRUE(name.find(".lora_A.weight.") != std::string::npos || name.find(".lora_B.weight.") != std::string::npos)
        << name;
  }
}

// A folder holding only a LoRA run's adapter (save_strategy no) holds a run, as one holding model.safetensors does.
TEST(LoraRun, AnAdapterInOutputDirIsARunANewRunDoesNotWriteOver) {
  const auto dir = temp_dir("lora-rerun");
  const auto data = write_copy_task_records(dir / "copy.jsonl");
  const auto out = dir / "out";
  auto r = train(data, out, kLora + "--save_strategy no");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(out / "adapter_model.safetensors"));
  const auto before = util::read_file(out / "adapter_model.safetensors");
  r = train(data, out, kLora + "--save_strategy no --seed 4");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("already holds a training run (a saved model)"), std::string::npos) << r.output;
  EXPECT_EQ(util::read_file(out / "adapter_model.safetensors"), before);
}

TEST(LoraRun, AResumedRunEqualsAnUninterruptedOne) {
  const auto dir = temp_dir("lora-resume");
  const auto data = write_copy_task_records(dir / "copy.jsonl");
  auto r = train(data, dir / "whole", kLora);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(data, dir / "resumed", kLora + "--resume_from_checkpoint " + in_quotes(dir / "whole" / "checkpoint-2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  expect_equal_tensors(dir / "whole" / "adapter_model.safetensors", dir / "resumed" / "adapter_model.safetensors");
  expect_equal_tensors(dir / "whole" / "checkpoint-6" / "optimizer.safetensors",
                       dir / "resumed" / "checkpoint-6" / "optimizer.safetensors");
  const auto a = util::read_json_file(dir / "whole" / "trainer_state.json")["log_history"];
  const auto b = util::read_json_file(dir / "resumed" / "trainer_state.json")["log_history"];
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i + 1 < a.size(); ++i) EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "entry " << i;

  // A checkpoint of other LoRA settings, or of a LoRA run in a full run, is named as such.
  r = train(data, dir / "other-r",
            kLora + "--lora_r 8 --resume_from_checkpoint " + in_quotes(dir / "whole" / "checkpoint-2"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("its adapter has r 4, this run's 8"), std::string::npos) << r.output;
  r = train(data, dir / "full",
            "--max_steps 6 --save_steps 2 --per_device_train_batch_size 2 --seed 3 --resume_from_checkpoint " +
                in_quotes(dir / "whole" / "checkpoint-2"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("it holds a LoRA adapter (adapter_config.json), this run trains the whole model"),
            std::string::npos)
      << r.output;
}

TEST(LoraRun, AdapterNameOrPathContinuesAPeftAdapter) {
  const auto dir = temp_dir("lora-continue");
  const auto data = write_copy_task_records(dir / "copy.jsonl");
  const auto out = dir / "out";
  // learning rate 0: the adapter saved is the adapter read, tensor for tensor, under PEFT's config.
  const auto r = train(data, out,
                       "--adapter_name_or_path " + in_quotes(fixture("lora-bart")) +
                           " --optim adamw_torch --learning_rate 0 --max_steps 2 --per_device_train_batch_size 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_equal_tensors(fixture("lora-bart") / "adapter_model.safetensors", out / "adapter_model.safetensors");
  auto mine = util::read_json_file(out / "adapter_config.json");
  auto peft = util::read_json_file(fixture("lora-bart") / "adapter_config.json");
  mine.erase("base_model_name_or_path");
  peft.erase("base_model_name_or_path");
  EXPECT_EQ(mine, peft);
}

}  // namespace
}  // namespace fitsum::test
