// ROUGE scores against Google's rouge_score: every pair of ../shared/data/rouge/rouge_vectors.jsonl (stemmed and
// not, all four types, within 1e-6), their means in rouge_aggregate.json, and the ROUGE-1.5.5 ground truth of
// rouge_score's own tests (rouge155_testdata). Also the behaviours that are easy to get wrong by hand.
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/eval/rouge.h"
#include "fitsum/eval/rouge_aggregate.h"
#include "fitsum/eval/rouge_io.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::eval {
namespace {

constexpr double kTolerance = 1e-6;

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::vector<nlohmann::json> records;
  std::string line;
  while (std::getline(in, line)) {
    records.push_back(nlohmann::json::parse(line));
  }
  return records;
}

// The largest |difference| over all types and measures; every one is also checked against the tolerance.
double expect_scores_near(const RougeScores& actual, const RougeScores& expected, double tolerance,
                          const std::string& context) {
  double max_error = 0.0;
  for (const RougeType type : kRougeTypes) {
    const RougeScore& a = actual[type];
    const RougeScore& e = expected[type];
    const std::string where = context + " " + std::string(rouge_type_name(type));
    EXPECT_NEAR(a.precision, e.precision, tolerance) << where << " precision";
    EXPECT_NEAR(a.recall, e.recall, tolerance) << where << " recall";
    EXPECT_NEAR(a.fmeasure, e.fmeasure, tolerance) << where << " fmeasure";
    max_error = std::max({max_error, std::abs(a.precision - e.precision), std::abs(a.recall - e.recall),
                          std::abs(a.fmeasure - e.fmeasure)});
  }
  return max_error;
}

TEST(Rouge, ReproducesEveryReferenceVector) {
  FITSUM_REQUIRE_SHARED();
  const auto records = read_jsonl(test::shared_dir() / "data" / "rouge" / "rouge_vectors.jsonl");
  ASSERT_EQ(records.size(), 333u);
  double max_error = 0.0;
  for (const auto& record : records) {
    for (const auto& [mode, use_stemmer] : {std::pair{"nostem", false}, std::pair{"stem", true}}) {
      RougeOptions options;
      options.use_stemmer = use_stemmer;
      const RougeScores scores =
          score_rouge(record["reference"].get<std::string>(), record["prediction"].get<std::string>(), options);
      const std::string context =
          "record " + record["idx"].dump() + " (" + record["category"].get<std::string>() + ", " + mode + ")";
      max_error = std::max(
          max_error, expect_scores_near(scores, rouge_scores_from_json(record["scores"][mode]), kTolerance, context));
    }
  }
  RecordProperty("max_abs_error", std::to_string(max_error));
}

TEST(Rouge, MeansMatchTheReferenceAggregate) {
  FITSUM_REQUIRE_SHARED();
  const auto records = read_jsonl(test::shared_dir() / "data" / "rouge" / "rouge_vectors.jsonl");
  const auto aggregate = util::read_json_file(test::shared_dir() / "data" / "rouge" / "rouge_aggregate.json");
  for (const auto& [mode, use_stemmer] : {std::pair{"nostem", false}, std::pair{"stem", true}}) {
    RougeOptions options;
    options.use_stemmer = use_stemmer;
    std::vector<RougeScores> scores;
    for (const auto& record : records) {
      scores.push_back(
          score_rouge(record["reference"].get<std::string>(), record["prediction"].get<std::string>(), options));
    }
    expect_scores_near(mean_rouge(scores), rouge_scores_from_json(aggregate["mean"][mode]), kTolerance, mode);
  }
}

TEST(Rouge, ReproducesRouge155GroundTruth) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = test::shared_dir() / "data" / "rouge" / "rouge155_testdata";
  const auto expected = util::read_json_file(dir / "expected.json");
  ASSERT_EQ(expected.size(), 11u);
  const auto lines_of = [](const std::string& text) {  // Python's readlines(): each line keeps its "\n"
    std::vector<std::string> lines;
    std::size_t start = 0;
    while (start < text.size()) {
      const std::size_t end = text.find('\n', start);
      const std::size_t stop = end == std::string::npos ? text.size() : end + 1;
      lines.push_back(text.substr(start, stop - start));
      start = stop;
    }
    return lines;
  };
  for (const auto& entry : expected) {
    const std::string reference_text = util::read_file(dir / entry["reference_file"].get<std::string>());
    const std::string prediction_text = util::read_file(dir / entry["prediction_file"].get<std::string>());
    std::string reference = reference_text;
    std::string prediction = prediction_text;
    if (!entry["line"].is_null()) {
      const auto line = entry["line"].get<std::size_t>();
      reference = lines_of(reference_text).at(line);
      prediction = lines_of(prediction_text).at(line);
    }
    RougeOptions options;
    options.use_stemmer = entry["use_stemmer"].get<bool>();
    const RougeScores scores = score_rouge(reference, prediction, options);
    const std::string name = entry["rouge_type"].get<std::string>();
    RougeType type = RougeType::kRouge1;
    for (const RougeType candidate : kRougeTypes) {
      if (rouge_type_name(candidate) == name) {
        type = candidate;
      }
    }
    const std::string context = name + " " + entry["reference_file"].get<std::string>() + " line " +
                                entry["line"].dump() + (options.use_stemmer ? " stemmed" : "");
    for (const char* measure : {"precision", "recall", "fmeasure"}) {
      const double actual = measure == std::string("precision") ? scores[type].precision
                            : measure == std::string("recall")  ? scores[type].recall
                                                                : scores[type].fmeasure;
      EXPECT_NEAR(actual, entry["rouge_score_full"][measure].get<double>(), kTolerance) << context << " " << measure;
      // ROUGE-1.5.5's own output, printed with 5 decimals.
      EXPECT_NEAR(actual, entry["rouge155_5dp"][measure].get<double>(), 5e-6 + 1e-12) << context << " " << measure;
    }
  }
}

TEST(Rouge, EmptySidesScoreZero) {
  const RougeOptions options;
  for (const auto& [reference, prediction] :
       {std::pair{"", "some words"}, std::pair{"some words", ""}, std::pair{"", ""}, std::pair{"a b", "?!"}}) {
    const RougeScores scores = score_rouge(reference, prediction, options);
    for (const RougeType type : kRougeTypes) {
      EXPECT_EQ(scores[type].precision, 0.0) << reference << " | " << prediction;
      EXPECT_EQ(scores[type].recall, 0.0);
      EXPECT_EQ(scores[type].fmeasure, 0.0);
    }
  }
}

TEST(Rouge, CountsNgramsAsMultisets) {
  const RougeScores scores = score_rouge("the cat the cat", "the the the dog", RougeOptions{});
  // Unigrams: overlap min(2,3) for "the" + 0 = 2 of 4 either way.
  EXPECT_DOUBLE_EQ(scores[RougeType::kRouge1].precision, 0.5);
  EXPECT_DOUBLE_EQ(scores[RougeType::kRouge1].recall, 0.5);
  // Bigrams: reference {the cat: 2, cat the: 1}, prediction {the the: 2, the dog: 1}.
  EXPECT_EQ(scores[RougeType::kRouge2].fmeasure, 0.0);
  // A one-token prediction has no bigrams: precision 0/max(0, 1).
  EXPECT_EQ(score_rouge("a b", "a", RougeOptions{})[RougeType::kRouge2].precision, 0.0);
}

TEST(Rouge, RougeLsumSplitsOnNewlinesOnly) {
  const RougeOptions options;
  // Without newlines rougeLsum equals rougeL.
  const RougeScores one_line = score_rouge("a b c. d e f.", "d e f. a b c.", options);
  EXPECT_DOUBLE_EQ(one_line[RougeType::kRougeL].fmeasure, 0.5);
  EXPECT_DOUBLE_EQ(one_line[RougeType::kRougeLsum].fmeasure, 0.5);
  // With them, each reference sentence finds its match; "\r" stays in the sentence and only separates tokens.
  const RougeScores lines = score_rouge("a b c.\r\nd e f.", "d e f.\n\na b c.", options);
  EXPECT_DOUBLE_EQ(lines[RougeType::kRougeL].fmeasure, 0.5);
  EXPECT_DOUBLE_EQ(lines[RougeType::kRougeLsum].precision, 1.0);
  EXPECT_DOUBLE_EQ(lines[RougeType::kRougeLsum].recall, 1.0);
}

TEST(Rouge, RougeLsumClipsRepeatedTokens) {
  // Both reference sentences have an LCS "a" with the prediction, but the prediction holds one "a" only.
  const RougeScores scores = score_rouge("a x\na y", "a z", RougeOptions{});
  EXPECT_DOUBLE_EQ(scores[RougeType::kRougeLsum].precision, 0.5);
  EXPECT_DOUBLE_EQ(scores[RougeType::kRougeLsum].recall, 0.25);
}

TEST(Rouge, SplitSentencesChangesOnlyRougeLsum) {
  RougeOptions split;
  split.split_sentences = true;
  const char* reference = "Anna bakes cookies. Tom eats cake.";
  const char* prediction = "Tom eats cake. Anna bakes cookies.";
  const RougeScores plain = score_rouge(reference, prediction, RougeOptions{});
  const RougeScores scores = score_rouge(reference, prediction, split);
  EXPECT_DOUBLE_EQ(plain[RougeType::kRougeLsum].fmeasure, 0.5);
  EXPECT_DOUBLE_EQ(scores[RougeType::kRougeLsum].fmeasure, 1.0);
  for (const RougeType type : {RougeType::kRouge1, RougeType::kRouge2, RougeType::kRougeL}) {
    EXPECT_EQ(scores[type].precision, plain[type].precision);
    EXPECT_EQ(scores[type].recall, plain[type].recall);
    EXPECT_EQ(scores[type].fmeasure, plain[type].fmeasure);
  }
}

TEST(Rouge, FmeasureIsTheHarmonicMean) {
  EXPECT_EQ(rouge_fmeasure(0.0, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(rouge_fmeasure(0.5, 1.0), 2.0 / 3.0);
  // The lead-3 record 0 triple: 2 * (6/14) * (6/16) / (6/14 + 6/16), computed as rouge_score does.
  EXPECT_EQ(rouge_fmeasure(0.42857142857142855, 0.375), 0.39999999999999997);
}

}  // namespace
}  // namespace fitsum::eval
