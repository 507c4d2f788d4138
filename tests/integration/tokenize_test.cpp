// `fitsum tokenize` end to end: the reference encodings of both PEGASUS tokenizers, the three SAMSum splits
// (record counts, the same output from jsonl, csv and json), malformed records, the length clamp and the
// round trip of its own output.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace fitsum::test {
namespace {

CommandResult tokenize(const std::string& arguments) {
  return run_command(fitsum_binary().string() + " tokenize " + arguments);
}

std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

std::vector<nlohmann::json> read_jsonl(const fs::path& file) {
  std::ifstream in(file);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) {
    records.push_back(nlohmann::json::parse(line));
  }
  return records;
}

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A csv cell as pandas' to_csv writes it (QUOTE_MINIMAL): quoted when it holds a separator, quote or line break.
std::string csv_cell(const std::string& value) {
  if (value.find_first_of(",\"\r\n") == std::string::npos) {
    return value;
  }
  std::string cell = "\"";
  for (const char c : value) {
    cell += c;
    if (c == '"') {
      cell += '"';
    }
  }
  return cell + "\"";
}

void write_csv(const std::vector<nlohmann::json>& records, const fs::path& file) {
  std::ofstream out(file, std::ios::binary);
  out << "id,dialogue,summary\n";
  for (const auto& record : records) {
    out << csv_cell(record["id"]) << "," << csv_cell(record["dialogue"]) << "," << csv_cell(record["summary"]) << "\n";
  }
}

void check_reference_vectors(const std::string& model) {
  const fs::path dir = temp_dir(model);
  const std::vector<nlohmann::json> vectors = read_jsonl(shared_dir() / "data" / model / "spm_vectors.jsonl");
  {
    std::ofstream input(dir / "texts.jsonl");
    for (const auto& vector : vectors) {
      input << nlohmann::json{{"idx", vector["idx"]}, {"text", vector["text"]}}.dump() << "\n";
    }
  }
  const CommandResult result =
      tokenize("--model " + quoted(shared_dir() / "data" / model) + " --input_file " + quoted(dir / "texts.jsonl") +
               " --output_file " + quoted(dir / "ids.jsonl") + " --text_column text");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::vector<nlohmann::json> output = read_jsonl(dir / "ids.jsonl");
  ASSERT_EQ(output.size(), vectors.size());
  std::size_t compared = 0;
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    EXPECT_FALSE(output[i].contains("labels"));  // no summary column
    if (!vectors[i]["hf_ids"].is_null()) {
      EXPECT_EQ(output[i]["input_ids"], vectors[i]["hf_ids"]) << model << " idx " << vectors[i]["idx"];
      ++compared;
    }
  }
  EXPECT_EQ(compared, vectors.size() - 3);
}

TEST(Tokenize, ReproducesTheReferenceIdsOfThePegasusTokenizer) {
  FITSUM_REQUIRE_SHARED();
  check_reference_vectors("pegasus");
}

TEST(Tokenize, ReproducesTheReferenceIdsOfTheTinyTokenizer) {
  FITSUM_REQUIRE_SHARED();
  check_reference_vectors("pegasus-tiny");
}

TEST(Tokenize, WritesEverySamsumRecordAndTheSameIdsFromCsvAndJson) {
  FITSUM_REQUIRE_SHARED();
  const fs::path dir = temp_dir("samsum");
  const fs::path model = source_dir() / "data" / "pegasus";
  const std::vector<std::pair<std::string, std::size_t>> splits = {
      {"train", 14732}, {"validation", 818}, {"test", 819}};
  for (const auto& [split, expected_count] : splits) {
    const fs::path jsonl = shared_dir() / "data" / "samsum" / (split + ".jsonl");
    const std::vector<nlohmann::json> records = read_jsonl(jsonl);
    write_csv(records, dir / (split + ".csv"));
    const CommandResult from_jsonl = tokenize("--model " + quoted(model) + " --input_file " + quoted(jsonl) +
                                              " --output_file " + quoted(dir / (split + ".jsonl.out")));
    ASSERT_EQ(from_jsonl.exit_code, 0) << from_jsonl.output;
    EXPECT_NE(from_jsonl.output.find("wrote " + std::to_string(expected_count) + " records"), std::string::npos)
        << from_jsonl.output;
    const std::vector<nlohmann::json> output = read_jsonl(dir / (split + ".jsonl.out"));
    ASSERT_EQ(output.size(), expected_count) << split;
    for (std::size_t i = 0; i < output.size(); ++i) {
      ASSERT_EQ(output[i]["id"], records[i]["id"]) << split << " record " << i;
      ASSERT_EQ(output[i]["input_ids"].back(), 1);
      ASSERT_LE(output[i]["input_ids"].size(), 1024u);
      ASSERT_LE(output[i]["labels"].size(), 128u);
    }
    const CommandResult from_csv =
        tokenize("--model " + quoted(model) + " --input_file " + quoted(dir / (split + ".csv")) + " --output_file " +
                 quoted(dir / (split + ".csv.out")));
    ASSERT_EQ(from_csv.exit_code, 0) << from_csv.output;
    EXPECT_EQ(read_bytes(dir / (split + ".csv.out")), read_bytes(dir / (split + ".jsonl.out"))) << split;
    if (split == "train") {
      // First record, checked against python3-sentencepiece (ids + 103, </s> appended).
      EXPECT_EQ(output[0]["id"], "13818513");
      EXPECT_EQ(output[0]["input_ids"],
                nlohmann::json::parse("[12195,151,125,7091,3659,107,842,119,245,181,152,10508,151,7435,147,12195,"
                                      "151,125,131,267,650,119,3469,29344,1]"));
      EXPECT_EQ(output[0]["labels"], nlohmann::json::parse("[12195,7091,3659,111,138,650,10508,181,3469,107,1]"));
      // The one empty dialogue is kept and encodes to [</s>].
      const auto empty = std::find_if(output.begin(), output.end(),
                                      [](const nlohmann::json& record) { return record["id"] == "13828807"; });
      ASSERT_NE(empty, output.end());
      EXPECT_EQ((*empty)["input_ids"], nlohmann::json::parse("[1]"));
      EXPECT_NE(from_jsonl.output.find("1 with empty text, 1 sources truncated to 1024 tokens"), std::string::npos)
          << from_jsonl.output;
    }
    if (split == "validation") {
      // The same records as a JSON array under "data".
      std::ofstream(dir / "validation.json") << nlohmann::json{{"version", 1}, {"data", records}}.dump(1);
      const CommandResult from_json =
          tokenize("--model " + quoted(model) + " --input_file " + quoted(dir / "validation.json") + " --output_file " +
                   quoted(dir / "validation.json.out"));
      ASSERT_EQ(from_json.exit_code, 0) << from_json.output;
      EXPECT_EQ(read_bytes(dir / "validation.json.out"), read_bytes(dir / "validation.jsonl.out"));
    }
  }
}

TEST(Tokenize, AMalformedRecordStopsWithFileLineAndFieldOrIsSkipped) {
  const fs::path dir = temp_dir("bad");
  std::ofstream(dir / "bad.jsonl") << "{\"id\": \"a\", \"dialogue\": \"A: hi\", \"summary\": \"hi\"}\n"
                                      "{\"id\": \"b\", \"dialogue\": [\"A: hi\"], \"summary\": \"hi\"}\n"
                                      "{\"id\": \"c\", \"dialogue\": \"B: yo\"}\n";
  const std::string common = "--model " + quoted(source_dir() / "data" / "pegasus") + " --input_file " +
                             quoted(dir / "bad.jsonl") + " --output_file " + quoted(dir / "out.jsonl");
  const CommandResult strict = tokenize(common);
  EXPECT_EQ(strict.exit_code, 1);
  EXPECT_NE(strict.output.find("bad.jsonl:2: field 'dialogue': expected a string, found array"), std::string::npos)
      << strict.output;
  EXPECT_FALSE(fs::exists(dir / "out.jsonl"));  // nothing half-written

  const CommandResult skipping = tokenize(common + " --skip_bad_records");
  ASSERT_EQ(skipping.exit_code, 0) << skipping.output;
  EXPECT_NE(skipping.output.find("1 malformed records skipped"), std::string::npos) << skipping.output;
  const std::vector<nlohmann::json> output = read_jsonl(dir / "out.jsonl");
  ASSERT_EQ(output.size(), 2u);
  EXPECT_EQ(output[0]["id"], "a");
  EXPECT_TRUE(output[0].contains("labels"));
  EXPECT_EQ(output[1]["id"], "c");
  EXPECT_FALSE(output[1].contains("labels"));  // no summary column: input_ids only
}

TEST(Tokenize, ClampsToMaxPositionEmbeddingsWithAWarning) {
  const fs::path dir = temp_dir("clamp");
  std::string long_text;
  for (int i = 0; i < 400; ++i) {
    long_text += "Anna: see you at the station tomorrow\n";
  }
  std::ofstream(dir / "long.jsonl") << nlohmann::json{{"dialogue", long_text}, {"summary", "Anna"}}.dump() << "\n";
  const CommandResult result =
      tokenize("--model " + quoted(source_dir() / "data" / "pegasus") + " --input_file " + quoted(dir / "long.jsonl") +
               " --output_file " + quoted(dir / "out.jsonl") + " --max_source_length 4096 --max_target_length 2");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find(
                "warning: max_source_length 4096 is above the model's max_position_embeddings 1024; using 1024"),
            std::string::npos)
      << result.output;
  const std::vector<nlohmann::json> output = read_jsonl(dir / "out.jsonl");
  ASSERT_EQ(output.size(), 1u);
  EXPECT_EQ(output[0]["input_ids"].size(), 1024u);
  EXPECT_EQ(output[0]["input_ids"].back(), 1);
  EXPECT_EQ(output[0]["labels"].size(), 2u);
  EXPECT_EQ(output[0]["labels"].back(), 1);
}

TEST(Tokenize, ItsOutputIsAValidPretokenizedInput) {
  const fs::path dir = temp_dir("round");
  const std::string model = "--tokenizer_name " + quoted(source_dir() / "data" / "pegasus");
  const CommandResult first =
      tokenize(model + " --input_file " + quoted(source_dir() / "data" / "samsum" / "test.jsonl") + " --output_file " +
               quoted(dir / "once.jsonl") + " --max_samples 25");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(read_jsonl(dir / "once.jsonl").size(), 25u);
  const CommandResult second =
      tokenize(model + " --input_file " + quoted(dir / "once.jsonl") + " --output_file " + quoted(dir / "twice.jsonl"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("25 pre-tokenized"), std::string::npos) << second.output;
  EXPECT_EQ(read_bytes(dir / "twice.jsonl"), read_bytes(dir / "once.jsonl"));
}

TEST(Tokenize, NeedsAModelOrTokenizerFolder) {
  const fs::path dir = temp_dir("usage");
  std::ofstream(dir / "in.jsonl") << "{\"dialogue\": \"x\"}\n";
  const CommandResult result =
      tokenize("--input_file " + quoted(dir / "in.jsonl") + " --output_file " + quoted(dir / "out.jsonl"));
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("needs --model DIR"), std::string::npos) << result.output;
}

TEST(Tokenize, FindsTheSentencePieceLibraryOrSaysWhereItLooked) {
  const fs::path dir = temp_dir("library");
  std::ofstream(dir / "in.jsonl") << "{\"dialogue\": \"Eric and Rob\"}\n";
  const std::string command = " " + fitsum_binary().string() + " tokenize --tokenizer_name " +
                              quoted(source_dir() / "data" / "pegasus") + " --input_file " + quoted(dir / "in.jsonl") +
                              " --output_file " + quoted(dir / "out.jsonl");
  const CommandResult missing = run_command("FITSUM_SENTENCEPIECE_LIB=" + quoted(dir / "nowhere.so") + command);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("cannot find libfitsum_sentencepiece.so"), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("nowhere.so"), std::string::npos) << missing.output;
  const fs::path library = fitsum_binary().parent_path() / "libfitsum_sentencepiece.so";
  const CommandResult overridden = run_command("FITSUM_SENTENCEPIECE_LIB=" + quoted(library) + command);
  ASSERT_EQ(overridden.exit_code, 0) << overridden.output;
  EXPECT_EQ(read_jsonl(dir / "out.jsonl").at(0)["input_ids"], nlohmann::json::parse("[6303,111,7374,1]"));
}

}  // namespace
}  // namespace fitsum::test
