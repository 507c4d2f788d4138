// The model families other than PEGASUS through the command line: a BART checkpoint (the committed tiny-bart
// fixture, made by transformers, with GPT-2 style vocab.json + merges.txt) is evaluated, fine-tuned, evaluated again
// and summarized with the same commands and flags as PEGASUS, and the saved folder is a BART folder again.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

std::string fitsum() { return fitsum_binary().string(); }
fs::path tiny_bart() { return source_dir() / "tests" / "data" / "fixtures" / "tiny-bart"; }

// The first 8 validation dialogues, the data of every command here.
fs::path eight_dialogues(const fs::path& dir) {
  std::ifstream in(source_dir() / "data" / "samsum" / "validation.jsonl");
  std::ofstream out(dir / "dialogues.jsonl");
  std::string line;
  for (int i = 0; i < 8 && std::getline(in, line); ++i) out << line << "\n";
  return dir / "dialogues.jsonl";
}

std::vector<std::string> lines_in(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// `fitsum eval` of `model` on `data`, greedy to 20 tokens; returns the metrics and leaves the predictions in
// `predictions`.
nlohmann::json evaluate(const fs::path& model, const fs::path& data, const fs::path& predictions) {
  const auto metrics = predictions.parent_path() / (predictions.stem().string() + "-metrics.json");
  const auto r = run_command(fitsum() + " eval --model '" + model.string() + "' --test_file '" + data.string() +
                             "' --max_source_length 64 --max_target_length 32 "
                             "--per_device_eval_batch_size 4 --num_beams 1 --max_length 20 --disable_tqdm "
                             "--predictions_file '" +
                             predictions.string() + "' --metrics_file '" + metrics.string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.exit_code == 0 ? util::read_json_file(metrics) : nlohmann::json::object();
}

TEST(FamiliesCli, BartIsEvaluatedFineTunedAndSummarizedLikePegasus) {
  const auto dir = temp_dir("families-bart");
  const auto data = eight_dialogues(dir);
  const auto before = evaluate(tiny_bart(), data, dir / "before.jsonl");
  ASSERT_TRUE(before.contains("eval_loss")) << before.dump();

  const auto out = dir / "out";
  const auto r = run_command(fitsum() + " train --model_name_or_path '" + tiny_bart().string() + "' --train_file '" +
                             data.string() + "' --output_dir '" + out.string() +
                             "' --max_source_length 64 --max_target_length 32 "
                             "--per_device_train_batch_size 4 --num_train_epochs 6 --optim adafactor "
                             "--learning_rate 3e-3 --logging_steps 1 --save_strategy no --disable_tqdm");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("12 optimizer steps"), std::string::npos) << r.output;

  // A BART folder again: its config, generation settings and byte-level BPE files.
  const auto config = util::read_json_file(out / "config.json");
  EXPECT_EQ(config["model_type"], "bart");
  EXPECT_EQ(config["architectures"][0], "BartForConditionalGeneration");
  for (const char* name : {"vocab.json", "merges.txt", "generation_config.json", "model.safetensors"}) {
    EXPECT_TRUE(fs::is_regular_file(out / name)) << name;
  }
  const auto generation = util::read_json_file(out / "generation_config.json");
  const auto original = util::read_json_file(tiny_bart() / "generation_config.json");
  for (const char* key : {"forced_bos_token_id", "forced_eos_token_id", "decoder_start_token_id"}) {
    EXPECT_EQ(generation.value(key, nlohmann::json()), original.value(key, nlohmann::json())) << key;
  }

  // Fine-tuning on these 8 dialogues lowers their loss: the model, tokenizer and data path all work on BART.
  const auto after = evaluate(out, data, dir / "after.jsonl");
  ASSERT_TRUE(after.contains("eval_loss")) << after.dump();
  EXPECT_LT(after["eval_loss"].get<double>(), 0.8 * before["eval_loss"].get<double>())
      << "before " << before.dump() << "\nafter " << after.dump();

  // `fitsum summarize` with the same decoding gives eval's summaries, one line each.
  const auto s = run_command("(" + fitsum() + " summarize --model '" + out.string() + "' --input_file '" +
                             data.string() + "' --max_source_length 64 --num_beams 1 --max_length 20 2>/dev/null)");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  const auto summaries = lines_in(s.output);
  std::ifstream predictions(dir / "after.jsonl");
  std::vector<std::string> expected;
  for (std::string line; std::getline(predictions, line);) {
    expected.push_back(nlohmann::json::parse(line)["summary"].get<std::string>());
  }
  ASSERT_EQ(expected.size(), 8u);
  EXPECT_EQ(summaries, expected);
}

// Resuming BART from a checkpoint (dropout on, accumulation, checkpointing, AdamW) ends with the weights of the run
// that was not interrupted, byte for byte, as PEGASUS does: nothing in the RNG replay or the state is family-specific.
TEST(FamiliesCli, BartResumesToTheWeightsOfAnUninterruptedRun) {
  const auto dir = temp_dir("families-bart-resume");
  const auto data = eight_dialogues(dir);
  const auto train = [&](const fs::path& out, const std::string& extra) {
    return run_command(fitsum() + " train --model_name_or_path '" + tiny_bart().string() + "' --train_file '" +
                       data.string() + "' --output_dir '" + out.string() +
                       "' --config_overrides dropout=0.1,attention_dropout=0.1 --max_source_length 64 "
                       "--max_target_length 32 --per_device_train_batch_size 2 --gradient_accumulation_steps 2 "
                       "--num_train_epochs 3 --optim adamw_torch --learning_rate 1e-3 --logging_steps 1 --seed 3 "
                       "--gradient_checkpointing --save_steps 2 --disable_tqdm " +
                       extra);
  };
  const auto whole = train(dir / "whole", "");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  fs::create_directories(dir / "resumed");
  fs::copy(dir / "whole" / "checkpoint-2", dir / "resumed" / "checkpoint-2", fs::copy_options::recursive);
  const auto resumed =
      train(dir / "resumed", "--resume_from_checkpoint '" + (dir / "resumed" / "checkpoint-2").string() + "'");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(util::read_file(dir / "resumed" / "model.safetensors"),
            util::read_file(dir / "whole" / "model.safetensors"));
  // And the checkpoint is not the end: its weights differ from the final ones.
  EXPECT_NE(util::read_file(dir / "whole" / "checkpoint-2" / "model.safetensors"),
            util::read_file(dir / "whole" / "model.safetensors"));
}

}  // namespace
}  // namespace fitsum::test
