// tests/data/make_long_documents.py builds the long inputs of the long-document tests and benchmarks from SAMSum:
// each document must reach its target length in PEGASUS tokens (as `fitsum tokenize` counts them, </s> included)
// and be consecutive SAMSum dialogues with their summaries.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace fitsum::test {
namespace {

std::vector<nlohmann::json> read_jsonl(const fs::path& file) {
  std::vector<nlohmann::json> records;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) records.push_back(nlohmann::json::parse(line));
  }
  return records;
}

TEST(LongDocuments, ReachTheirTargetLengthFromConsecutiveSamsumDialogues) {
  FITSUM_REQUIRE_SHARED();
  const auto work = temp_dir("long_documents");
  const auto output = work / "long.jsonl";
  const auto built = run_command("python3 '" + (source_dir() / "tests/data/make_long_documents.py").string() +
                                 "' --fitsum '" + fitsum_binary().string() + "' --lengths 1000,2000 --per_length 1" +
                                 " --output '" + output.string() + "'");
  ASSERT_EQ(built.exit_code, 0) << built.output;
  const auto documents = read_jsonl(output);
  ASSERT_EQ(documents.size(), 2u);

  // Count again with fitsum itself, at a length that truncates nothing.
  const auto ids = work / "ids.jsonl";
  fs::create_directories(work / "tok");
  for (const char* name : {"spiece.model", "tokenizer_config.json", "special_tokens_map.json"}) {
    fs::copy_file(shared_dir() / "data/pegasus" / name, work / "tok" / name);
  }
  std::ofstream(work / "tok/config.json") << R"({"model_type": "pegasus", "max_position_embeddings": 1048576})";
  const auto recount = run_command("'" + fitsum_binary().string() + "' tokenize --model '" + (work / "tok").string() +
                                   "' --input_file '" + output.string() + "' --output_file '" + ids.string() +
                                   "' --max_source_length 1048576");
  ASSERT_EQ(recount.exit_code, 0) << recount.output;
  const auto tokenized = read_jsonl(ids);
  ASSERT_EQ(tokenized.size(), 2u);

  std::ifstream samsum(shared_dir() / "data/samsum/train.jsonl");
  std::string line;
  std::getline(samsum, line);
  const auto first = nlohmann::json::parse(line);
  const std::vector<std::int64_t> targets = {1000, 2000};
  for (std::size_t i = 0; i < documents.size(); ++i) {
    const auto length = static_cast<std::int64_t>(tokenized[i]["input_ids"].size());
    EXPECT_EQ(documents[i]["source_tokens"].get<std::int64_t>(), length) << i;
    EXPECT_GE(length, targets[i]) << i;
    // Just long enough: one SAMSum dialogue is at most ~1100 tokens, so the overshoot stays below that.
    EXPECT_LT(length, targets[i] + 1100) << i;
  }
  // The first document starts with SAMSum's first dialogue and its summary.
  const auto dialogue = documents[0]["dialogue"].get<std::string>();
  const auto summary = documents[0]["summary"].get<std::string>();
  EXPECT_EQ(dialogue.rfind(first["dialogue"].get<std::string>() + "\n\n", 0), 0u);
  EXPECT_EQ(summary.rfind(first["summary"].get<std::string>(), 0), 0u);
}

}  // namespace
}  // namespace fitsum::test
