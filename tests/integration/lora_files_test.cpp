// LoRA adapters through the commands: `fitsum merge` writes a full model that computes what the adapter computes,
// under the output-folder rules of `train`; `eval` and `summarize` with --adapter_name_or_path generate what the
// merged model generates, and not what the base generates. The adapter is the one PEFT wrote
// (tests/data/fixtures/lora-bart, tests/data/make_lora_fixtures.py).
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fitsum/io/model_loader.h"
#include "fitsum/io/output_folder_lock.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

fs::path fixture(const std::string& name) { return source_dir() / "tests" / "data" / "fixtures" / name; }
std::string in_quotes(const fs::path& p) { return "'" + p.string() + "'"; }
std::string fitsum() { return fitsum_binary().string(); }

CommandResult merge(const fs::path& out, const std::string& flags = "") {
  return run_command(fitsum() + " merge --model " + in_quotes(fixture("tiny-bart")) + " --adapter " +
                     in_quotes(fixture("lora-bart")) + " --output_dir " + in_quotes(out) + " " + flags + " 2>&1");
}

torch::Tensor logits_of(const io::ModelSource& source) {
  auto loaded = io::load_model(source, 0);
  loaded.model->eval();
  const auto ids = torch::tensor({0, 438, 589, 512, 494, 161, 552, 398, 294, 591, 2}, torch::kLong).view({1, -1});
  const auto labels = torch::tensor({0, 438, 589, 512, 494, 2}, torch::kLong).view({1, -1});
  torch::NoGradGuard no_grad;
  return loaded.model->forward(ids, torch::ones_like(ids), labels).logits;
}

TEST(LoraMerge, TheMergedModelComputesWhatTheAdapterComputes) {
  const auto out = temp_dir("merge") / "merged";
  const auto r = merge(out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("merged       16 adapted layers"), std::string::npos) << r.output;
  for (const char* file : {"model.safetensors", "config.json", "generation_config.json", "vocab.json", "merges.txt",
                           "tokenizer.json"}) {
    EXPECT_TRUE(fs::is_regular_file(out / file)) << file;
  }
  EXPECT_FALSE(fs::exists(out / "adapter_config.json"));
  EXPECT_EQ(util::read_file(out / "generation_config.json"),
            util::read_file(fixture("tiny-bart") / "generation_config.json"));
  io::ModelSource adapted, merged, base;
  adapted.model_name_or_path = base.model_name_or_path = fixture("tiny-bart").string();
  adapted.adapter_name_or_path = fixture("lora-bart").string();
  merged.model_name_or_path = out.string();
  const auto want = logits_of(adapted);
  const auto got = logits_of(merged);
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max().item<double>();
  EXPECT_GT((logits_of(base) - want).abs().max().item<double>(), 1e-2);
}

TEST(LoraMerge, TheOutputFolderFollowsTrainsRules) {
  const auto dir = temp_dir("merge-rules");
  {  // a folder that holds a model: refused, untouched; replaced with --overwrite_output_dir, other files kept
    const auto out = dir / "holds-model";
    fs::create_directories(out);
    util::write_file_atomic(out / "config.json", "{}");
    util::write_file_atomic(out / "notes.txt", "mine");
    const auto refused = merge(out);
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_NE(refused.output.find("fitsum: error: output_dir '" + out.string() +
                                  "' already holds a model (config.json); pass --overwrite_output_dir"),
              std::string::npos)
        << refused.output;
    EXPECT_EQ(util::read_file(out / "config.json"), "{}");
    EXPECT_FALSE(fs::exists(out / "model.safetensors"));
    const auto replaced = merge(out, "--overwrite_output_dir");
    ASSERT_EQ(replaced.exit_code, 0) << replaced.output;
    EXPECT_TRUE(fs::exists(out / "model.safetensors"));
    EXPECT_EQ(util::read_file(out / "notes.txt"), "mine");
  }
  {  // the base model's folder or the adapter's as the output: refused even with --overwrite_output_dir
    const auto r = run_command(fitsum() + " merge --model " + in_quotes(fixture("tiny-bart")) + " --adapter " +
                               in_quotes(fixture("lora-bart")) + " --output_dir " + in_quotes(fixture("lora-bart")) +
                               " --overwrite_output_dir 2>&1");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("is the adapter's folder; the merge reads it"), std::string::npos) << r.output;
  }
  {  // a folder a training run holds
    const auto out = dir / "in-use";
    io::OutputFolderLock lock(out);
    const auto r = merge(out);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("is in use by another training run"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  }
  {  // a refused merge (a damaged adapter) leaves no folder behind; a regular file is no folder
    const auto bad = dir / "bad-adapter";
    fs::create_directories(bad);
    fs::copy_file(fixture("lora-bart") / "adapter_config.json", bad / "adapter_config.json");
    const auto out = dir / "never-made";
    const auto r = run_command(fitsum() + " merge --model " + in_quotes(fixture("tiny-bart")) + " --adapter " +
                               in_quotes(bad) + " --output_dir " + in_quotes(out) + " 2>&1");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("neither adapter_model.safetensors nor adapter_model.bin"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out));
    util::write_file_atomic(dir / "file", "x");
    const auto file = merge(dir / "file");
    EXPECT_EQ(file.exit_code, 1) << file.output;
    EXPECT_NE(file.output.find("is a regular file, not a folder"), std::string::npos) << file.output;
  }
}

std::string generated_ids(const std::string& model, const std::string& adapter, const fs::path& data,
                          const fs::path& predictions) {
  const auto r = run_command(fitsum() + " eval --model " + in_quotes(model) +
                             (adapter.empty() ? "" : " --adapter_name_or_path " + in_quotes(adapter)) +
                             " --test_file " + in_quotes(data) + " --predictions_file " + in_quotes(predictions) +
                             " --num_beams 2 --max_length 10 --min_length 0 --no_repeat_ngram_size 0 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::string ids;
  std::ifstream in(predictions);
  for (std::string line; std::getline(in, line);) ids += nlohmann::json::parse(line)["generated_ids"].dump() + "\n";
  return ids;
}

TEST(LoraCommands, EvalAndSummarizeWithAnAdapterGenerateWhatTheMergedModelGenerates) {
  const auto dir = temp_dir("adapter-eval");
  const auto merged = dir / "merged";
  ASSERT_EQ(merge(merged).exit_code, 0);
  const auto data = write_copy_task_records(dir / "copy.jsonl");
  const auto base = fixture("tiny-bart").string();
  const auto with_adapter = generated_ids(base, fixture("lora-bart").string(), data, dir / "adapter.jsonl");
  EXPECT_EQ(with_adapter, generated_ids(merged.string(), "", data, dir / "merged.jsonl"));
  EXPECT_NE(with_adapter, generated_ids(base, "", data, dir / "base.jsonl"));

  util::write_file_atomic(dir / "dialogue.txt", "Amanda: I baked cookies. Do you want some?\nJerry: Sure!\n");
  const auto summarize = [&](const std::string& model, const std::string& adapter) {
    const auto r = run_command("(" + fitsum() + " summarize --model " + in_quotes(model) +
                               (adapter.empty() ? "" : " --adapter_name_or_path " + in_quotes(adapter)) +
                               " --num_beams 2 --max_length 10 --min_length 3 < " + in_quotes(dir / "dialogue.txt") +
                               " 2>/dev/null)");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  const auto summary = summarize(base, fixture("lora-bart").string());
  EXPECT_EQ(summary, summarize(merged.string(), ""));
  EXPECT_NE(summary, summarize(base, ""));
}

TEST(LoraCommands, AnAdapterFolderGivenAsTheModelSaysHowToUseIt) {
  const auto dir = temp_dir("adapter-as-model");
  const auto data = write_copy_task_records(dir / "copy.jsonl");
  const auto r = run_command(fitsum() + " eval --model " + in_quotes(fixture("lora-bart")) + " --test_file " +
                             in_quotes(data) + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("holds a LoRA adapter (adapter_config.json), not a model; pass its base model as the model "
                          "and this folder as --adapter_name_or_path"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace fitsum::test
