// The length clamp of the commands that read data for a model: for one model folder, `fitsum tokenize` and
// `fitsum train` lower max_source_length to the same max_position_embeddings, config.json's or, where it names none,
// Hugging Face's default for the family (1024 for PEGASUS), as io/hf_config.h reads it.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

// "N sources truncated to L tokens" of a command's data summary: L, or -1 when the line is missing.
long long truncated_to(const std::string& output) {
  std::smatch match;
  if (!std::regex_search(output, match, std::regex("sources truncated to ([0-9]+) tokens"))) return -1;
  return std::stoll(match[1]);
}

TEST(LengthClamp, TokenizeAndTrainClampAFolderWithoutMaxPositionEmbeddingsAlike) {
  const auto dir = temp_dir("length-clamp");
  const auto model = dir / "model";
  fs::copy(shared_dir() / "fixtures" / "tiny-pegasus", model);
  auto config = util::read_json_file(model / "config.json");
  ASSERT_EQ(config.erase("max_position_embeddings"), 1u);
  util::write_file_atomic(model / "config.json", config.dump(2));
  // One dialogue of about 2400 tokens, every id inside the tiny model's 167-token vocabulary.
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the, the. a, of the and to in a ";
  std::ofstream(dir / "long.jsonl") << nlohmann::json{{"dialogue", text}, {"summary", "the"}}.dump() << "\n";
  const std::string warning =
      "fitsum: warning: max_source_length 2000 is above the model's max_position_embeddings 1024; using 1024";

  const auto tokenize = run_command(fitsum_binary().string() + " tokenize --model " + quoted(model) +
                                    " --tokenizer_name " + quoted(source_dir() / "data" / "pegasus") +
                                    " --input_file " + quoted(dir / "long.jsonl") + " --output_file " +
                                    quoted(dir / "out.jsonl") + " --max_source_length 2000");
  ASSERT_EQ(tokenize.exit_code, 0) << tokenize.output;
  EXPECT_EQ(truncated_to(tokenize.output), 1024) << tokenize.output;
  EXPECT_NE(tokenize.output.find(warning), std::string::npos) << tokenize.output;
  std::ifstream written(dir / "out.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(written, line));
  EXPECT_EQ(nlohmann::json::parse(line)["input_ids"].size(), 1024u);
  // tokenize's output trains at the same max_source_length (its weights hold 64 positions: the run starts from the
  // config alone, as --config_name runs do).
  const auto train = run_command(fitsum_binary().string() + " train --config_name " + quoted(model / "config.json") +
                                 " --train_file " + quoted(dir / "out.jsonl") + " --output_dir " + quoted(dir / "run") +
                                 " --max_source_length 2000 --max_steps 1 --save_strategy no --disable_tqdm");
  ASSERT_EQ(train.exit_code, 0) << train.output;

  EXPECT_EQ(truncated_to(train.output), truncated_to(tokenize.output)) << train.output;
  EXPECT_NE(train.output.find(warning), std::string::npos) << train.output;
}

}  // namespace
}  // namespace fitsum::test
