// The model families other than PEGASUS through the command line: BART and T5 checkpoints (the committed tiny-bart,
// tiny-t5 and tiny-t5-v1_1 fixtures, made by transformers; BART with GPT-2 style vocab.json + merges.txt, T5 with a
// SentencePiece model) are evaluated, fine-tuned, evaluated again and summarized with the same commands and flags as
// PEGASUS, and the saved folder is a folder of the same family again.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

std::string fitsum() { return fitsum_binary().string(); }
fs::path fixture(const std::string& name) { return source_dir() / "tests" / "data" / "fixtures" / name; }

// One family's checkpoint and what its folder holds.
struct Family {
  std::string fixture;
  std::string flags;  // what every command gets: T5's source prefix, the tokenizer of a folder without one
  std::string model_type;
  std::string architecture;
  std::vector<std::string> files;  // what a saved folder must hold
  std::string dropout;             // --config_overrides turning dropout on
};

std::ostream& operator<<(std::ostream& out, const Family& f) { return out << f.fixture; }

std::vector<Family> families() {
  const std::string t5_flags = "--source_prefix 'summarize: ' ";
  return {
      {"tiny-bart",
       "",
       "bart",
       "BartForConditionalGeneration",
       {"vocab.json", "merges.txt", "generation_config.json", "model.safetensors"},
       "dropout=0.1,attention_dropout=0.1"},
      {"tiny-t5",
       t5_flags,
       "t5",
       "T5ForConditionalGeneration",
       {"spiece.model", "generation_config.json", "model.safetensors"},
       "dropout_rate=0.1"},
      // v1.1's gated-gelu, untied head; the fixture has no tokenizer, so it borrows tiny-t5's (the same 512 ids).
      {"tiny-t5-v1_1",
       t5_flags + "--tokenizer_name '" + fixture("tiny-t5").string() + "' ",
       "t5",
       "T5ForConditionalGeneration",
       {"spiece.model", "generation_config.json", "model.safetensors"},
       "dropout_rate=0.1"},
  };
}

std::string test_name(const ::testing::TestParamInfo<Family>& info) {
  std::string name = info.param.fixture;
  for (auto& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

class FamiliesCli : public ::testing::TestWithParam<Family> {};

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
nlohmann::json evaluate(const fs::path& model, const fs::path& data, const fs::path& predictions,
                        const std::string& flags) {
  const auto metrics = predictions.parent_path() / (predictions.stem().string() + "-metrics.json");
  const auto r =
      run_command(fitsum() + " eval " + flags + "--model '" + model.string() + "' --test_file '" + data.string() +
                  "' --max_source_length 64 --max_target_length 32 "
                  "--per_device_eval_batch_size 4 --num_beams 1 --max_length 20 --disable_tqdm "
                  "--predictions_file '" +
                  predictions.string() + "' --metrics_file '" + metrics.string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.exit_code == 0 ? util::read_json_file(metrics) : nlohmann::json::object();
}

TEST_P(FamiliesCli, IsEvaluatedFineTunedAndSummarizedLikePegasus) {
  const auto& family = GetParam();
  const auto dir = temp_dir("families-" + family.fixture);
  const auto data = eight_dialogues(dir);
  const auto before = evaluate(fixture(family.fixture), data, dir / "before.jsonl", family.flags);
  ASSERT_TRUE(before.contains("eval_loss")) << before.dump();

  const auto out = dir / "out";
  const auto r =
      run_command(fitsum() + " train " + family.flags + "--model_name_or_path '" + fixture(family.fixture).string() +
                  "' --train_file '" + data.string() + "' --output_dir '" + out.string() +
                  "' --max_source_length 64 --max_target_length 32 "
                  "--per_device_train_batch_size 4 --num_train_epochs 8 --optim adafactor "
                  "--learning_rate 3e-3 --logging_steps 1 --save_strategy no --disable_tqdm");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("16 optimizer steps"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("source_prefix"), std::string::npos) << "warned although a prefix is set\n" << r.output;

  // A folder of the same family again: its config, generation settings and tokenizer files.
  const auto config = util::read_json_file(out / "config.json");
  EXPECT_EQ(config["model_type"], family.model_type);
  EXPECT_EQ(config["architectures"][0], family.architecture);
  for (const auto& name : family.files) EXPECT_TRUE(fs::is_regular_file(out / name)) << name;
  const auto generation = util::read_json_file(out / "generation_config.json");
  const auto original = util::read_json_file(fixture(family.fixture) / "generation_config.json");
  for (const char* key :
       {"forced_bos_token_id", "forced_eos_token_id", "decoder_start_token_id", "eos_token_id", "pad_token_id"}) {
    EXPECT_EQ(generation.value(key, nlohmann::json()), original.value(key, nlohmann::json())) << key;
  }

  // Fine-tuning on these 8 dialogues lowers their loss: the model, tokenizer and data path all work on the family.
  const auto saved_flags = family.model_type == "t5" ? std::string("--source_prefix 'summarize: ' ") : family.flags;
  const auto after = evaluate(out, data, dir / "after.jsonl", saved_flags);
  ASSERT_TRUE(after.contains("eval_loss")) << after.dump();
  EXPECT_LT(after["eval_loss"].get<double>(), 0.8 * before["eval_loss"].get<double>())
      << "before " << before.dump() << "\nafter " << after.dump();

  // `fitsum summarize` with the same decoding gives eval's summaries, one line each.
  const auto s =
      run_command("(" + fitsum() + " summarize " + saved_flags + "--model '" + out.string() + "' --input_file '" +
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

// Resuming from a checkpoint (dropout on, accumulation, checkpointing, AdamW) ends with the weights of the run that
// was not interrupted, byte for byte, as PEGASUS does: nothing in the RNG replay or the state is family-specific.
TEST_P(FamiliesCli, ResumesToTheWeightsOfAnUninterruptedRun) {
  const auto& family = GetParam();
  const auto dir = temp_dir("families-resume-" + family.fixture);
  const auto data = eight_dialogues(dir);
  const auto train = [&](const fs::path& out, const std::string& extra) {
    return run_command(fitsum() + " train " + family.flags + "--model_name_or_path '" +
                       fixture(family.fixture).string() + "' --train_file '" + data.string() + "' --output_dir '" +
                       out.string() + "' --config_overrides " + family.dropout +
                       " --max_source_length 64 "
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

// T5 without its task prefix trains (the prefix is the user's choice) but is warned about, as run_summarization.py
// does.
TEST(FamiliesCliWarnings, T5WithoutASourcePrefixIsWarnedAbout) {
  const auto dir = temp_dir("families-t5-prefix");
  const auto data = eight_dialogues(dir);
  const auto r =
      run_command(fitsum() + " eval --model '" + fixture("tiny-t5").string() + "' --test_file '" + data.string() +
                  "' --max_source_length 64 --num_beams 1 --max_length 8 --no_loss "
                  "--disable_tqdm");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: this is a T5 model and no --source_prefix is set"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Families, FamiliesCli, ::testing::ValuesIn(families()), test_name);

}  // namespace
}  // namespace fitsum::test
