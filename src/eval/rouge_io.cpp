// Implements include/fitsum/eval/rouge_io.h.
#include "fitsum/eval/rouge_io.h"

#include <cstdint>
#include <stdexcept>

#include "fitsum/util/data_file_stream.h"
#include "fitsum/util/files.h"
#include "fitsum/util/utf8.h"

namespace fitsum::eval {

namespace {

std::string field_list(const nlohmann::json& object) {
  std::string names;
  for (const auto& item : object.items()) {
    names += (names.empty() ? "" : ", ") + item.key();
  }
  return names.empty() ? "none" : names;
}

std::string text_field(const nlohmann::json& record, const std::string& field, const std::string& where,
                       const char* flag) {
  const auto it = record.find(field);
  if (it == record.end()) {
    throw std::runtime_error(where + ": the record has no field '" + field + "' (its fields: " + field_list(record) +
                             "); choose the field with " + flag);
  }
  if (!it->is_string()) {
    throw std::runtime_error(where + ": field '" + field + "' is " + std::string(it->type_name()) +
                             ", expected a string");
  }
  return it->get<std::string>();
}

}  // namespace

std::vector<SummaryPair> read_summary_pairs(const std::filesystem::path& path, const SummaryFields& fields) {
  util::DataFileStream stream(path, "the file");  // plain or gzip, a line at a time
  std::vector<SummaryPair> pairs;
  std::string line;
  bool overlong = false;
  std::uint64_t text_bytes = 0;  // bounded as a whole-file read is, whether the file is compressed or not
  for (std::size_t line_number = stream.line(); stream.read_line(line, util::kMaxJsonFileBytes, overlong);
       line_number = stream.line()) {
    const std::string where = "'" + path.string() + "' line " + std::to_string(line_number);
    text_bytes += line.size() + 1;
    if (text_bytes > util::kMaxReadFileBytes) {
      throw std::runtime_error("cannot read '" + path.string() + "': its text is longer than the " +
                               std::to_string(util::kMaxReadFileBytes) +
                               "-byte limit for this kind of file; check that it is the file you meant");
    }
    if (overlong) {
      throw std::runtime_error(where + " is longer than " + std::to_string(util::kMaxJsonFileBytes) +
                               " bytes; one prediction and reference per line expected");
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      continue;
    }
    if (const auto bad = util::find_invalid_utf8(line); bad != std::string::npos) {
      throw std::runtime_error(where + " is not valid UTF-8 (byte " + std::to_string(bad) +
                               " of the line); the file is read as UTF-8 text, as Hugging Face datasets reads it: "
                               "convert it (e.g. iconv -f latin1 -t utf-8)");
    }
    nlohmann::json record;
    try {
      record = util::parse_json(line, where);
    } catch (const util::JsonError& e) {
      throw std::runtime_error(where + " is not valid JSON (one object per line expected): " + e.reason());
    }
    if (!record.is_object()) {
      throw std::runtime_error(where + " is a JSON " + std::string(record.type_name()) +
                               ", expected an object with the prediction and reference fields");
    }
    SummaryPair pair;
    pair.prediction = text_field(record, fields.prediction, where, "prediction_field");
    pair.reference = text_field(record, fields.reference, where, "reference_field");
    pairs.push_back(std::move(pair));
  }
  return pairs;
}

nlohmann::ordered_json rouge_scores_to_json(const RougeScores& scores) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const RougeType type : kRougeTypes) {
    const RougeScore& score = scores[type];
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["precision"] = score.precision;
    entry["recall"] = score.recall;
    entry["fmeasure"] = score.fmeasure;
    out[std::string(rouge_type_name(type))] = std::move(entry);
  }
  return out;
}

RougeScores rouge_scores_from_json(const nlohmann::json& value) {
  RougeScores scores;
  for (const RougeType type : kRougeTypes) {
    const std::string name(rouge_type_name(type));
    if (!value.is_object() || !value.contains(name)) {
      throw std::invalid_argument("ROUGE scores lack '" + name + "'");
    }
    const nlohmann::json& entry = value.at(name);
    for (const char* key : {"precision", "recall", "fmeasure"}) {
      if (!entry.is_object() || !entry.contains(key) || !entry.at(key).is_number()) {
        throw std::invalid_argument("ROUGE scores lack a number at '" + name + "." + key + "'");
      }
    }
    scores[type] = {entry.at("precision").get<double>(), entry.at("recall").get<double>(),
                    entry.at("fmeasure").get<double>()};
  }
  return scores;
}

}  // namespace fitsum::eval
