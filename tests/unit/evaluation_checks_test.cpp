// What an evaluation checks before it runs (train::check_evaluation_examples), the metric keys it reports, and the
// labels it decodes as run_summarization's compute_metrics does (HF's ignore index -100 as the pad id).
#include <gtest/gtest.h>

#include "fitsum/families/family.h"
#include "fitsum/tokenizer/tokenizer.h"
#include "fitsum/train/evaluation.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

data::Example example(std::vector<data::TokenId> input_ids, std::optional<std::vector<data::TokenId>> labels,
                      std::size_t line) {
  data::Example e;
  e.input_ids = std::move(input_ids);
  e.labels = std::move(labels);
  e.line = line;
  return e;
}

TEST(EvaluationChecks, NoExamplesIsRefusedNamingTheFile) {
  EXPECT_EQ(error_of<std::invalid_argument>([] { train::check_evaluation_examples({}, "val.jsonl", "validation_file", 100, nullptr, false); }),
            "validation_file 'val.jsonl' has no examples to evaluate (no records, or every one skipped); give a file "
            "with records");
}

TEST(EvaluationChecks, IdsOutsideTheVocabularyAreRefusedNamingFileLineAndField) {
  const std::vector<data::Example> ok = {example({5, 1}, std::vector<data::TokenId>{7, 1, -100, -100}, 1)};
  EXPECT_EQ(error_of<std::invalid_argument>([&] { train::check_evaluation_examples(ok, "t.jsonl", "test_file", 100, nullptr, false); }), "");
  const std::vector<data::Example> input = {example({5, 1}, std::nullopt, 1), example({5, 100, 1}, std::nullopt, 4)};
  EXPECT_EQ(error_of<std::invalid_argument>([&] { train::check_evaluation_examples(input, "t.jsonl", "test_file", 100, nullptr, false); }),
            "t.jsonl:4: field 'input_ids': token id 100 is outside the model's vocabulary 0..99 (tokenized with "
            "another tokenizer?)");
  // -100 is label padding, not an input id.
  const std::vector<data::Example> padded_input = {example({-100, 1}, std::nullopt, 2)};
  EXPECT_NE(error_of<std::invalid_argument>([&] {
              train::check_evaluation_examples(padded_input, "t.jsonl", "test_file", 100, nullptr, false);
            }).find("t.jsonl:2: field 'input_ids': token id -100"),
            std::string::npos);
  const std::vector<data::Example> label = {example({5, 1}, std::vector<data::TokenId>{-1, 1}, 3)};
  EXPECT_NE(error_of<std::invalid_argument>([&] {
              train::check_evaluation_examples(label, "t.jsonl", "test_file", 100, nullptr, false);
            }).find("t.jsonl:3: field 'labels': token id -1"),
            std::string::npos);
}

TEST(EvaluationChecks, LabelsRougeDecodesMustBeTheTokenizersIds) {
  const auto tokenizer = families::load_tokenizer(source_dir() / "data" / "pegasus");
  const auto tokens = tokenizer->vocab_size();                     // 96103
  const auto model_vocab = static_cast<std::int64_t>(tokens) + 8;  // a model table with rows the tokenizer lacks
  const std::vector<data::Example> examples = {example({5, 1}, std::vector<data::TokenId>{tokens + 2, 1}, 7)};
  // Without decoding (no generation) the model's vocabulary is the bound.
  EXPECT_EQ(error_of<std::invalid_argument>([&] {
              train::check_evaluation_examples(examples, "v.jsonl", "validation_file", model_vocab, tokenizer.get(),
                                               false);
            }),
            "");
  EXPECT_EQ(error_of<std::invalid_argument>([&] {
              train::check_evaluation_examples(examples, "v.jsonl", "validation_file", model_vocab, tokenizer.get(),
                                               true);
            }),
            "v.jsonl:7: field 'labels': token id 96105 is outside the vocabulary of the tokenizer that decodes them "
            "for ROUGE 0..96102 (tokenized with another tokenizer?)");
}

TEST(EvaluationChecks, ReferencesDecodeIgnoreIndexAsPadding) {
  EXPECT_EQ(train::reference_ids({7, 8, 1, -100, -100}, 0), (std::vector<std::int64_t>{7, 8, 1, 0, 0}));
  const auto tokenizer = families::load_tokenizer(source_dir() / "data" / "pegasus");
  const std::vector<data::TokenId> plain = {500, 600, 1};
  const std::vector<data::TokenId> padded = {500, 600, 1, -100, -100};
  EXPECT_EQ(tokenizer->decode(train::reference_ids(padded, tokenizer->pad_id())), tokenizer->decode(plain));
}

TEST(EvaluationChecks, MetricKeysAreWhatTheEvaluationReports) {
  using Keys = std::vector<std::string>;
  EXPECT_EQ(train::evaluation_metric_keys(true, true, true),
            (Keys{"eval_loss", "eval_rouge1", "eval_rouge2", "eval_rougeL", "eval_rougeLsum", "eval_gen_len",
                  "eval_runtime", "eval_samples_per_second"}));
  EXPECT_EQ(train::evaluation_metric_keys(true, false, true),
            (Keys{"eval_loss", "eval_runtime", "eval_samples_per_second"}));
  EXPECT_EQ(train::evaluation_metric_keys(false, true, true),
            (Keys{"eval_gen_len", "eval_runtime", "eval_samples_per_second"}));
  EXPECT_EQ(train::evaluation_metric_keys(true, true, false),
            (Keys{"eval_loss", "eval_gen_len", "eval_runtime", "eval_samples_per_second"}));
}

}  // namespace
}  // namespace fitsum::test
