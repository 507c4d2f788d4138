// `fitsum rouge`: ROUGE-1/2/L/Lsum of predictions against references from a JSON Lines file, identical to
// Google's rouge_score. Prints the corpus aggregate as JSON on stdout (the exact mean unless --aggregate bootstrap),
// a table (x100) on stderr, and optionally one JSON line of scores per input record.
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "fitsum/eval/rouge.h"
#include "fitsum/eval/rouge_aggregate.h"
#include "fitsum/eval/rouge_io.h"
#include "fitsum/util/files.h"
#include "fitsum/util/output_paths.h"

namespace fitsum::cli {

namespace {

enum class Aggregate { kMean, kBootstrap };
enum class OutputFormat { kJson, kTable };

struct RougeCommandOptions {
  std::string input_file;
  eval::SummaryFields fields;
  eval::RougeOptions rouge{/*use_stemmer=*/true, /*split_sentences=*/false};
  std::string per_record_file;
  Aggregate aggregate = Aggregate::kMean;
  OutputFormat format = OutputFormat::kJson;
  eval::BootstrapOptions bootstrap;
};

std::string percent(double fraction) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << 100.0 * fraction;
  return out.str();
}

std::string padded(const std::string& text, std::size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

std::string describe(const RougeCommandOptions& options, std::size_t records) {
  std::ostringstream out;
  out << "ROUGE of " << records << " records from " << options.input_file
      << " (prediction_field=" << options.fields.prediction << ", reference_field=" << options.fields.reference
      << ", use_stemmer=" << (options.rouge.use_stemmer ? "true" : "false")
      << ", rougeLsum sentences: " << (options.rouge.split_sentences ? "split, one per line" : "lines as given")
      << ")\n";
  if (options.aggregate == Aggregate::kMean) {
    out << "aggregate: exact mean over the records\n";
  } else {
    out << "aggregate: bootstrap mid (median of " << options.bootstrap.n_samples << " resample means, seed "
        << options.bootstrap.seed << "), with the " << 100.0 * options.bootstrap.confidence_interval
        << "% interval in brackets\n";
  }
  return out.str();
}

std::string mean_table(const eval::RougeScores& mean) {
  std::ostringstream out;
  out << "type        precision  recall  fmeasure   (x100)\n";
  for (const eval::RougeType type : eval::kRougeTypes) {
    const eval::RougeScore& score = mean[type];
    out << padded(std::string(eval::rouge_type_name(type)), 12) << std::setw(9) << percent(score.precision)
        << std::setw(8) << percent(score.recall) << std::setw(10) << percent(score.fmeasure) << "\n";
  }
  return out.str();
}

std::string bootstrap_table(const eval::RougeInterval& interval) {
  std::ostringstream out;
  out << "type        precision               recall                  fmeasure   (x100)\n";
  for (const eval::RougeType type : eval::kRougeTypes) {
    const auto cell = [&](double eval::RougeScore::*measure) {
      return percent(interval.mid[type].*measure) + " [" + percent(interval.low[type].*measure) + ", " +
             percent(interval.high[type].*measure) + "]";
    };
    out << padded(std::string(eval::rouge_type_name(type)), 12) << padded(cell(&eval::RougeScore::precision), 24)
        << padded(cell(&eval::RougeScore::recall), 24) << cell(&eval::RougeScore::fmeasure) << "\n";
  }
  return out.str();
}

void run_rouge(const RougeCommandOptions& options) {
  util::require_output_files({{"--per_record_file", options.per_record_file}}, {{"--input_file", options.input_file}});
  const std::vector<eval::SummaryPair> pairs = eval::read_summary_pairs(options.input_file, options.fields);
  if (pairs.empty()) {
    throw std::runtime_error("'" + options.input_file + "' holds no records (one JSON object per line expected)");
  }
  std::cerr << describe(options, pairs.size());

  std::vector<eval::RougeScores> scores;
  scores.reserve(pairs.size());
  for (const eval::SummaryPair& pair : pairs) {
    scores.push_back(eval::score_rouge(pair.reference, pair.prediction, options.rouge));
  }

  if (!options.per_record_file.empty()) {
    util::AtomicFileWriter writer(options.per_record_file);
    for (const eval::RougeScores& record : scores) {
      const std::string line = eval::rouge_scores_to_json(record).dump() + "\n";
      writer.write(line.data(), line.size());
    }
    writer.commit();
  }

  eval::RougeScores printed;
  std::string table;
  if (options.aggregate == Aggregate::kMean) {
    printed = eval::mean_rouge(scores);
    table = mean_table(printed);
  } else {
    const eval::RougeInterval interval = eval::bootstrap_rouge(scores, options.bootstrap);
    printed = interval.mid;
    table = bootstrap_table(interval);
  }

  if (options.format == OutputFormat::kTable) {
    std::cout << table;
  } else {
    std::cerr << table;
    std::cout << eval::rouge_scores_to_json(printed).dump(2) << "\n";
  }
  if (!options.per_record_file.empty()) {
    std::cerr << "per-record scores: " << options.per_record_file << "\n";
  }
}

}  // namespace

void add_rouge_command(CLI::App& app) {
  auto options = std::make_shared<RougeCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "rouge",
      "ROUGE-1/2/L/Lsum of predictions against references, identical to Google's rouge_score (Hugging Face "
      "evaluate). Prints the aggregate as JSON (fractions in [0, 1]) on stdout and a table (x100) on stderr.");
  command->add_option("--input_file", options->input_file, "JSON Lines file, one record per line")->required();
  command->add_option("--prediction_field", options->fields.prediction, "field holding the predicted summary")
      ->capture_default_str();
  command->add_option("--reference_field", options->fields.reference, "field holding the reference summary")
      ->capture_default_str();
  command
      ->add_option("--use_stemmer", options->rouge.use_stemmer,
                   "Porter-stem tokens longer than 3 characters, as run_summarization.py does")
      ->option_text("{true,false}=true");
  command->add_flag("--rouge_split_sentences", options->rouge.split_sentences,
                    "put each sentence on its own line before rougeLsum, as run_summarization.py does with "
                    "nltk.sent_tokenize (rule-based here; see docs/rouge.md)");
  command->add_option("--per_record_file", options->per_record_file,
                      "write one JSON line of scores per input record, in input order");
  const std::map<std::string, Aggregate> aggregates = {{"mean", Aggregate::kMean},
                                                       {"bootstrap", Aggregate::kBootstrap}};
  command
      ->add_option("--aggregate", options->aggregate,
                   "mean: exact mean; bootstrap: rouge_score's BootstrapAggregator mid, 1000 resamples, "
                   "95% interval (what Hugging Face evaluate reports)")
      ->transform(CLI::CheckedTransformer(aggregates))
      ->option_text("{mean,bootstrap}=mean");
  command->add_option("--seed", options->bootstrap.seed, "random seed of the bootstrap resampling")
      ->capture_default_str();
  const std::map<std::string, OutputFormat> formats = {{"json", OutputFormat::kJson}, {"table", OutputFormat::kTable}};
  command
      ->add_option("--format", options->format,
                   "json: JSON on stdout, table on stderr; table: only the table, on stdout")
      ->transform(CLI::CheckedTransformer(formats))
      ->option_text("{json,table}=json");
  command->callback([options] { run_rouge(*options); });
}

}  // namespace fitsum::cli
