// Files around ROUGE: (prediction, reference) pairs read from JSON Lines, and scores as JSON in the nesting
// rouge_score and Hugging Face use: {"rouge1": {"precision": p, "recall": r, "fmeasure": f}, "rouge2": ...,
// "rougeL": ..., "rougeLsum": ...}, keys in that order, values as fractions with full double precision.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fitsum/eval/rouge.h"

namespace fitsum::eval {

struct SummaryPair {
  std::string prediction;
  std::string reference;
};

// Which fields of each JSON object hold the texts.
struct SummaryFields {
  std::string prediction = "prediction";
  std::string reference = "reference";
};

// Reads one JSON object per line (blank lines are skipped), from a plain or gzip-compressed file, a line at a time.
// Throws std::runtime_error naming the file, the 1-based line and the field when a line is not UTF-8, not a JSON
// object, or a field is missing or not a string, and naming the file when its gzip stream is broken.
std::vector<SummaryPair> read_summary_pairs(const std::filesystem::path& path, const SummaryFields& fields);

nlohmann::ordered_json rouge_scores_to_json(const RougeScores& scores);

// Parses the nesting above back (for reference files and tests); throws std::invalid_argument naming the
// missing key.
RougeScores rouge_scores_from_json(const nlohmann::json& value);

}  // namespace fitsum::eval
