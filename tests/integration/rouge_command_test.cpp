// `fitsum rouge` end to end: the LEAD-3 baseline over the 819 SAMSum test dialogues against
// ../shared/data/rouge/lead3_test_aggregate.json and lead3_test_scores.jsonl (stemmed and not, within 1e-6), the
// per-record file of the 333 reference vectors, the bootstrap mode, the table mode and the error for a missing
// field.
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace fitsum::test {
namespace {

constexpr double kTolerance = 1e-6;
const char* const kTypes[] = {"rouge1", "rouge2", "rougeL", "rougeLsum"};
const char* const kMeasures[] = {"precision", "recall", "fmeasure"};

std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::vector<nlohmann::json> records;
  std::string line;
  while (std::getline(in, line)) {
    records.push_back(nlohmann::json::parse(line));
  }
  return records;
}

std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

// Runs `fitsum rouge` with its stderr discarded (inside a subshell, because run_command adds 2>&1 outside).
CommandResult run_rouge_stdout(const std::string& arguments) {
  return run_command("(" + quoted(fitsum_binary()) + " rouge " + arguments + " 2>/dev/null)");
}

// The JSON that `fitsum rouge` prints on stdout.
nlohmann::json run_rouge_json(const std::string& arguments) {
  const CommandResult result = run_rouge_stdout(arguments);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return nlohmann::json::parse(result.output);
}

// The LEAD-3 input: prediction from lead3_test_scores.jsonl, reference = the gold summary of the same test id.
fs::path write_lead3_input() {
  std::map<std::string, std::string> summaries;
  for (const auto& record : read_jsonl(shared_dir() / "data" / "samsum" / "test.jsonl")) {
    summaries[record["id"].get<std::string>()] = record["summary"].get<std::string>();
  }
  const fs::path path = temp_dir("lead3") / "lead3.jsonl";
  std::ofstream out(path);
  for (const auto& record : read_jsonl(shared_dir() / "data" / "rouge" / "lead3_test_scores.jsonl")) {
    const std::string id = record["id"].get<std::string>();
    out << nlohmann::json{{"id", id}, {"prediction", record["prediction"]}, {"reference", summaries.at(id)}}.dump()
        << "\n";
  }
  return path;
}

TEST(RougeCommand, ReproducesTheLead3AggregateAndEveryRecord) {
  FITSUM_REQUIRE_SHARED();
  const fs::path input = write_lead3_input();
  const auto expected_records = read_jsonl(shared_dir() / "data" / "rouge" / "lead3_test_scores.jsonl");
  ASSERT_EQ(expected_records.size(), 819u);
  std::ifstream aggregate_in(shared_dir() / "data" / "rouge" / "lead3_test_aggregate.json");
  const auto expected_aggregate = nlohmann::json::parse(aggregate_in);

  // Stemming is the default; the unstemmed run says so explicitly.
  for (const auto& [mode, stemmer_argument] : {std::pair{"stem", ""}, std::pair{"nostem", " --use_stemmer false"}}) {
    const fs::path per_record = input.parent_path() / (std::string(mode) + ".jsonl");
    const nlohmann::json aggregate =
        run_rouge_json("--input_file " + quoted(input) + stemmer_argument + " --per_record_file " + quoted(per_record));
    for (const char* type : kTypes) {
      for (const char* measure : kMeasures) {
        EXPECT_NEAR(aggregate[type][measure].get<double>(),
                    expected_aggregate["mean"][mode][type][measure].get<double>(), kTolerance)
            << mode << " " << type << " " << measure;
      }
    }
    if (std::string(mode) == "stem") {
      // As a table prints it: 31.31 / 8.68 (the SAMSum paper's LEAD-3 row, from ROUGE-1.5.5, reads 31.40 / 8.68).
      EXPECT_NEAR(aggregate["rouge1"]["fmeasure"].get<double>(), 0.3131, 5e-5);
      EXPECT_NEAR(aggregate["rouge2"]["fmeasure"].get<double>(), 0.0868, 5e-5);
    }
    const auto records = read_jsonl(per_record);
    ASSERT_EQ(records.size(), expected_records.size());
    for (std::size_t i = 0; i < records.size(); ++i) {
      for (const char* type : kTypes) {
        const auto& triple = expected_records[i]["scores"][mode][type];  // [precision, recall, fmeasure]
        for (std::size_t k = 0; k < 3; ++k) {
          EXPECT_NEAR(records[i][type][kMeasures[k]].get<double>(), triple[k].get<double>(), kTolerance)
              << mode << " record " << i << " (" << expected_records[i]["id"] << ") " << type << " " << kMeasures[k];
        }
      }
    }
  }
}

TEST(RougeCommand, PerRecordFileMatchesTheReferenceVectorsInInputOrder) {
  FITSUM_REQUIRE_SHARED();
  const fs::path vectors = shared_dir() / "data" / "rouge" / "rouge_vectors.jsonl";
  const auto expected = read_jsonl(vectors);
  for (const auto& [mode, use_stemmer] : {std::pair{"stem", "true"}, std::pair{"nostem", "false"}}) {
    const fs::path per_record = temp_dir(mode) / "scores.jsonl";
    run_rouge_json("--input_file " + quoted(vectors) + " --prediction_field prediction --reference_field reference" +
                   " --use_stemmer " + use_stemmer + " --per_record_file " + quoted(per_record));
    const auto records = read_jsonl(per_record);
    ASSERT_EQ(records.size(), expected.size());
    for (std::size_t i = 0; i < records.size(); ++i) {
      ASSERT_EQ(records[i].size(), 4u);
      for (const char* type : kTypes) {
        ASSERT_EQ(records[i][type].size(), 3u);
        for (const char* measure : kMeasures) {
          EXPECT_NEAR(records[i][type][measure].get<double>(), expected[i]["scores"][mode][type][measure].get<double>(),
                      kTolerance)
              << mode << " record " << i << " " << type << " " << measure;
        }
      }
    }
  }
}

TEST(RougeCommand, BootstrapMidIsSeededAndCloseToTheMean) {
  FITSUM_REQUIRE_SHARED();
  const fs::path input = write_lead3_input();
  const std::string arguments = "--input_file " + quoted(input) + " --aggregate bootstrap --seed 3";
  const nlohmann::json first = run_rouge_json(arguments);
  const nlohmann::json again = run_rouge_json(arguments);
  EXPECT_EQ(first, again);
  const nlohmann::json mean = run_rouge_json("--input_file " + quoted(input));
  for (const char* type : kTypes) {
    for (const char* measure : kMeasures) {
      // The median of 1000 resample means sits within a few standard errors / sqrt(1000) of the mean.
      EXPECT_NEAR(first[type][measure].get<double>(), mean[type][measure].get<double>(), 2e-3) << type << measure;
    }
  }
}

TEST(RougeCommand, TableModePrintsPercentages) {
  FITSUM_REQUIRE_SHARED();
  const fs::path input = write_lead3_input();
  const CommandResult result = run_rouge_stdout("--format table --input_file " + quoted(input));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("rouge1"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("31.31"), std::string::npos) << result.output;  // stemmed rouge1 F x100
  EXPECT_NE(result.output.find("8.68"), std::string::npos) << result.output;   // stemmed rouge2 F x100
  EXPECT_EQ(result.output.find('{'), std::string::npos) << result.output;
}

TEST(RougeCommand, MissingFieldIsAnErrorNamingFileLineAndField) {
  FITSUM_REQUIRE_SHARED();
  const fs::path samsum = shared_dir() / "data" / "samsum" / "test.jsonl";
  const CommandResult result =
      run_command(quoted(fitsum_binary()) + " rouge --input_file " + quoted(samsum) + " --prediction_field dialogue");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("test.jsonl' line 1"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("'reference'"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("reference_field"), std::string::npos) << result.output;

  const CommandResult with_summary =
      run_rouge_stdout("--input_file " + quoted(samsum) + " --prediction_field dialogue --reference_field summary");
  EXPECT_EQ(with_summary.exit_code, 0) << with_summary.output;
}

}  // namespace
}  // namespace fitsum::test
