// Reading (prediction, reference) pairs from JSON Lines, with errors that name the file, line and field, and the
// JSON form of scores.
#include <zlib.h>

#include <fstream>

#include <gtest/gtest.h>

#include "fitsum/eval/rouge_io.h"
#include "test_support.h"

namespace fitsum::eval {
namespace {

std::filesystem::path write_lines(const std::string& name, const std::string& content) {
  const auto path = test::temp_dir("io") / name;
  std::ofstream(path) << content;
  return path;
}

std::string error_of(const std::filesystem::path& path, const SummaryFields& fields) {
  try {
    read_summary_pairs(path, fields);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(RougeIo, ReadsPairsInOrderAndSkipsBlankLines) {
  const auto path = write_lines("pairs.jsonl",
                                "{\"prediction\": \"p1\", \"reference\": \"r1\", \"id\": 1}\n"
                                "\n"
                                "{\"summary\": \"r2\", \"prediction\": \"p2\\nline\", \"reference\": \"r2\"}\r\n");
  const auto pairs = read_summary_pairs(path, SummaryFields{});
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].prediction, "p1");
  EXPECT_EQ(pairs[0].reference, "r1");
  EXPECT_EQ(pairs[1].prediction, "p2\nline");

  SummaryFields fields;
  fields.reference = "summary";
  const auto by_name =
      read_summary_pairs(write_lines("named.jsonl", "{\"prediction\": \"p\", \"summary\": \"s\"}"), fields);
  ASSERT_EQ(by_name.size(), 1u);
  EXPECT_EQ(by_name[0].reference, "s");
}

TEST(RougeIo, MissingFieldNamesFileLineAndField) {
  const auto path = write_lines("missing.jsonl",
                                "{\"prediction\": \"p\", \"reference\": \"r\"}\n"
                                "{\"prediction\": \"p\", \"summary\": \"r\"}\n");
  const std::string message = error_of(path, SummaryFields{});
  EXPECT_NE(message.find("missing.jsonl"), std::string::npos) << message;
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;
  EXPECT_NE(message.find("'reference'"), std::string::npos) << message;
  EXPECT_NE(message.find("summary"), std::string::npos) << message;  // lists the fields it has
  EXPECT_NE(message.find("reference_field"), std::string::npos) << message;
}

TEST(RougeIo, RejectsNonStringFieldsAndBadLines) {
  const std::string not_string =
      error_of(write_lines("n.jsonl", "{\"prediction\": 3, \"reference\": \"r\"}\n"), SummaryFields{});
  EXPECT_NE(not_string.find("line 1"), std::string::npos) << not_string;
  EXPECT_NE(not_string.find("'prediction' is number"), std::string::npos) << not_string;
  const std::string bad_json = error_of(write_lines("b.jsonl", "{\"prediction\": \n"), SummaryFields{});
  EXPECT_NE(bad_json.find("line 1 is not valid JSON"), std::string::npos) << bad_json;
  const std::string array = error_of(write_lines("a.jsonl", "\n[1, 2]\n"), SummaryFields{});
  EXPECT_NE(array.find("line 2 is a JSON array"), std::string::npos) << array;
  EXPECT_THROW(read_summary_pairs(test::temp_dir("io") / "absent.jsonl", SummaryFields{}), std::runtime_error);
}

// A gzip file (whatever its name) is read as its text; text that is not UTF-8 is named by file and line.
TEST(RougeIo, ReadsGzipFilesAndNamesTextThatIsNotUtf8) {
  const auto path = test::temp_dir("io") / "pairs.jsonl";
  const std::string text =
      "{\"prediction\": \"p1\", \"reference\": \"r1\"}\n\n{\"prediction\": \"p2\", \"reference\": \"r2\"}\n";
  gzFile out = gzopen(path.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(gzwrite(out, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(out), Z_OK);
  const auto pairs = read_summary_pairs(path, SummaryFields{});
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[1].prediction, "p2");

  const std::string latin1 = error_of(write_lines("latin1.jsonl",
                                                  "{\"prediction\": \"p\", \"reference\": \"r\"}\n"
                                                  "{\"prediction\": \"caf\xe9\", \"reference\": \"r\"}\n"),
                                      SummaryFields{});
  EXPECT_NE(latin1.find("latin1.jsonl' line 2 is not valid UTF-8 (byte 19 of the line)"), std::string::npos) << latin1;
  EXPECT_EQ(latin1.find('\xe9'), std::string::npos) << "the invalid byte itself is not printed";
}

TEST(RougeIo, ScoresRoundTripThroughJsonInRougeScoreOrder) {
  RougeScores scores;
  scores[RougeType::kRouge1] = {0.1, 0.2, 0.30000000000000004};
  scores[RougeType::kRougeLsum] = {1.0, 0.0, 0.0};
  const auto json = rouge_scores_to_json(scores);
  EXPECT_EQ(json.dump(),
            "{\"rouge1\":{\"precision\":0.1,\"recall\":0.2,\"fmeasure\":0.30000000000000004},"
            "\"rouge2\":{\"precision\":0.0,\"recall\":0.0,\"fmeasure\":0.0},"
            "\"rougeL\":{\"precision\":0.0,\"recall\":0.0,\"fmeasure\":0.0},"
            "\"rougeLsum\":{\"precision\":1.0,\"recall\":0.0,\"fmeasure\":0.0}}");
  const RougeScores back = rouge_scores_from_json(nlohmann::json::parse(json.dump()));
  EXPECT_EQ(back[RougeType::kRouge1].fmeasure, 0.30000000000000004);
  EXPECT_EQ(back[RougeType::kRougeLsum].precision, 1.0);
  EXPECT_THROW(rouge_scores_from_json(nlohmann::json::parse("{\"rouge1\": {}}")), std::invalid_argument);
}

}  // namespace
}  // namespace fitsum::eval
