// Records to examples: truncation as HF's truncation=True, summaries to labels, pre-tokenized records used as
// they are, malformed records named by file, line and field (or skipped and counted), sample limits, the
// max_position_embeddings clamp, option validation and the JSON-line round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "fitsum/data/dataset.h"
#include "fitsum/tokenizer/bart_tokenizer.h"
#include "fitsum/tokenizer/pegasus_tokenizer.h"
#include "fitsum/tokenizer/t5_tokenizer.h"
#include "test_support.h"

namespace fitsum::data {
namespace {

using Ids = std::vector<TokenId>;

const tokenizer::PegasusTokenizer& pegasus() {
  static const tokenizer::PegasusTokenizer tokenizer =
      tokenizer::PegasusTokenizer::from_folder(test::source_dir() / "data" / "pegasus");
  return tokenizer;
}

// From ../shared/data/pegasus/spm_vectors.jsonl, idx 1 and 0.
const std::string kEric = "Eric and Rob are going to watch a stand-up on youtube.";
const Ids kEricIds = {6303, 111, 7374, 127, 313, 112, 1183, 114, 1281, 121, 768, 124, 11909, 107, 1};
const std::string kHannah = "Hannah needs Betty's number but Amanda doesn't have it. She needs to contact Larry.";
const Ids kHannahIds = {12636, 397, 17379, 131, 116, 344, 155, 12195, 591, 131, 144,
                        133,   126, 107,   452, 397, 112, 471, 9915,  107, 1};

Record record(nlohmann::json fields, std::size_t line = 7) { return Record{std::move(fields), line}; }

fs::path write_file(const std::string& name, const std::string& content) {
  const fs::path path = test::temp_dir("dataset") / name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

std::string bad_record_message(const Record& input, const DataOptions& options) {
  try {
    make_example(input, "train.jsonl", pegasus(), options);
  } catch (const BadRecord& e) {
    return e.what();
  }
  return "no error";
}

TEST(Dataset, TokenizesTextAndSummary) {
  const Example example =
      make_example(record({{"id", "13862856"}, {"dialogue", kHannah}, {"summary", kEric}}), "f", pegasus(), {});
  EXPECT_EQ(example.id, "13862856");
  EXPECT_EQ(example.input_ids, kHannahIds);
  ASSERT_TRUE(example.labels);
  EXPECT_EQ(*example.labels, kEricIds);
  EXPECT_TRUE(example.attention_mask.empty());
  EXPECT_EQ(example.line, 7u);

  const Example no_summary = make_example(record({{"dialogue", kEric}}), "f", pegasus(), {});
  EXPECT_TRUE(no_summary.id.is_null());
  EXPECT_FALSE(no_summary.labels);

  const Example empty = make_example(record({{"dialogue", ""}, {"summary", ""}}), "f", pegasus(), {});
  EXPECT_EQ(empty.input_ids, (Ids{1}));
  EXPECT_EQ(*empty.labels, (Ids{1}));
}

TEST(Dataset, SourcePrefixIsTokenizedWithTheText) {
  DataOptions options;
  options.source_prefix = kEric + " ";  // run_summarization.py: inputs = [prefix + inp for inp in inputs]
  const Example example = make_example(record({{"dialogue", kHannah}, {"summary", kEric}}), "f", pegasus(), options);
  EXPECT_EQ(example.input_ids, pegasus().encode(kEric + " " + kHannah));
  ASSERT_GT(example.input_ids.size(), kHannahIds.size());
  EXPECT_TRUE(std::equal(kHannahIds.begin(), kHannahIds.end(), example.input_ids.end() - kHannahIds.size()));
  EXPECT_EQ(*example.labels, kEricIds);  // the summary has no prefix
}

TEST(Dataset, TruncatesLikeHuggingFaceKeepingEosLast) {
  DataOptions options;
  options.text_column = "text";
  options.summary_column = "target";
  options.max_source_length = 6;
  options.max_target_length = 4;
  ReadStats stats;
  const Example example = make_example(record({{"text", kHannah}, {"target", kEric}}), "f", pegasus(), options, &stats);
  EXPECT_EQ(example.input_ids, (Ids{12636, 397, 17379, 131, 116, 1}));
  EXPECT_EQ(*example.labels, (Ids{6303, 111, 7374, 1}));
  EXPECT_EQ(stats.truncated_sources, 1u);
  EXPECT_EQ(stats.truncated_targets, 1u);
  options.max_source_length = static_cast<std::int64_t>(kHannahIds.size());  // exactly fits: untouched
  EXPECT_EQ(make_example(record({{"text", kHannah}}), "f", pegasus(), options).input_ids, kHannahIds);
}

TEST(Dataset, UsesPretokenizedRecordsAsTheyAre) {
  const Example example = make_example(
      record({{"input_ids", {5000, 7, 1}}, {"attention_mask", {1, 1, 0}}, {"labels", {9, 1, -100}}, {"dialogue", "x"}}),
      "f", pegasus(), {});
  EXPECT_EQ(example.input_ids, (Ids{5000, 7, 1}));
  EXPECT_EQ(example.attention_mask, (Ids{1, 1, 0}));
  EXPECT_EQ(*example.labels, (Ids{9, 1, -100}));
  // A csv cell holding the list works as well.
  const Example from_csv = make_example(record({{"input_ids", "[12, 1]"}, {"labels", "[1]"}}), "f", pegasus(), {});
  EXPECT_EQ(from_csv.input_ids, (Ids{12, 1}));
  EXPECT_EQ(*from_csv.labels, (Ids{1}));
}

TEST(Dataset, MalformedRecordsNameFileLineAndField) {
  const DataOptions options;
  EXPECT_EQ(bad_record_message(record({{"text", "hi"}}), options),
            "train.jsonl:7: field 'dialogue': missing; the record has text (choose the column with text_column)");
  EXPECT_EQ(bad_record_message(record({{"dialogue", 3}}), options),
            "train.jsonl:7: field 'dialogue': expected a string, found number");
  EXPECT_EQ(bad_record_message(record({{"dialogue", "hi"}, {"summary", nullptr}}), options),
            "train.jsonl:7: field 'summary': expected a string, found null");
  EXPECT_NE(bad_record_message(record({{"input_ids", {1, 96103}}}), options)
                .find("field 'input_ids': token id 96103 is outside the vocabulary 0..96102"),
            std::string::npos);
  EXPECT_NE(bad_record_message(record({{"input_ids", {1}}, {"labels", {-5}}}), options).find("field 'labels'"),
            std::string::npos);
  EXPECT_NE(bad_record_message(record({{"input_ids", {5, 1}}, {"attention_mask", {1}}}), options)
                .find("field 'attention_mask': has 1 entries for 2 input_ids"),
            std::string::npos);
  EXPECT_NE(bad_record_message(record({{"input_ids", "nonsense"}}), options).find("expected a list of token ids"),
            std::string::npos);
  DataOptions short_inputs;
  short_inputs.max_source_length = 2;
  EXPECT_NE(bad_record_message(record({{"input_ids", {5, 6, 1}}}), short_inputs)
                .find("has 3 tokens, more than max_source_length 2"),
            std::string::npos);
}

TEST(Dataset, ReaderStopsAtTheFirstBadRecordOrSkipsAndCounts) {
  const fs::path file = write_file("mixed.jsonl", "{\"dialogue\": \"" + kEric +
                                                      "\", \"summary\": \"a\"}\n"
                                                      "{\"dialogue\": 5}\n"
                                                      "not json\n"
                                                      "{\"dialogue\": \"\", \"summary\": \"b\"}\n");
  DataOptions options;
  ExampleReader strict(file, pegasus(), options);
  Example example;
  ASSERT_TRUE(strict.next(example));
  try {
    strict.next(example);
    FAIL() << "expected a bad record";
  } catch (const BadRecord& e) {
    EXPECT_NE(std::string(e.what()).find("mixed.jsonl:2: field 'dialogue'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("skip_bad_records"), std::string::npos);
  }

  options.skip_bad_records = true;
  ReadStats stats;
  const std::vector<Example> examples = read_examples(file, pegasus(), options, std::nullopt, &stats);
  ASSERT_EQ(examples.size(), 2u);
  EXPECT_EQ(examples[0].input_ids, kEricIds);
  EXPECT_EQ(examples[1].input_ids, (Ids{1}));
  EXPECT_EQ(examples[1].line, 4u);
  EXPECT_EQ(stats.examples, 2u);
  EXPECT_EQ(stats.skipped_bad, 2u);
  ASSERT_EQ(stats.first_skipped.size(), 2u);
  EXPECT_NE(stats.first_skipped[1].find("mixed.jsonl:3"), std::string::npos);
  EXPECT_EQ(stats.empty_text, 1u);
  EXPECT_NE(stats.summary(options).find("2 malformed records skipped"), std::string::npos);

  ReadStats limited;
  EXPECT_EQ(read_examples(file, pegasus(), options, 1, &limited).size(), 1u);
  EXPECT_EQ(limited.skipped_bad, 0u);  // stops before reading further

  std::vector<Example> all = examples;
  EXPECT_EQ(drop_empty_examples(all, pegasus().encode("")), 1u);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].input_ids, kEricIds);
}

// "index out of range in self" from inside the forward pass, before: a tokenizer_name of another model (PEGASUS's
// 96103 ids for a 167-id model) gave ids past the embedding. Now the first such record stops the run, naming the
// file, line, field and both sizes, also under skip_bad_records (every record would be skipped).
TEST(Dataset, IdsOfATokenizerLargerThanTheModelStopTheRunNamingBothSizes) {
  const std::int64_t tiny_vocab = 167;
  const auto message_of = [&](const nlohmann::json& fields) -> std::string {
    try {
      make_example(record(fields), "train.jsonl", &pegasus(), tiny_vocab, {}, nullptr);
    } catch (const BadRecord& e) {
      return std::string("a bad record: ") + e.what();
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "no error";
  };
  const auto text = message_of({{"dialogue", kEric}, {"summary", "a"}});
  EXPECT_NE(text.find("train.jsonl:7: field 'dialogue': the tokenizer gives token id 6303, outside the model's "
                      "vocabulary 0..166 (the tokenizer has 96103 ids, the model's config.json vocab_size is 167)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tokenizer_name"), std::string::npos) << text;
  // The text fits ("the" is 109, </s> 1) but the summary does not.
  const auto summary = message_of({{"dialogue", "the"}, {"summary", kHannah}});
  EXPECT_NE(summary.find("field 'summary': the tokenizer gives token id 12636"), std::string::npos) << summary;
  // Ids inside the model's vocabulary pass: the check is on the ids, not on the tokenizer's size alone.
  const Example fits =
      make_example(record({{"dialogue", "the"}, {"summary", "the"}}), "f", &pegasus(), tiny_vocab, {}, nullptr);
  EXPECT_EQ(fits.input_ids, (Ids{109, 1}));

  const fs::path file = write_file("mismatch.jsonl", "{\"dialogue\": \"" + kEric + "\", \"summary\": \"a\"}\n");
  DataOptions skipping;
  skipping.skip_bad_records = true;
  try {
    read_examples(file, &pegasus(), tiny_vocab, skipping, std::nullopt, nullptr);
    ADD_FAILURE() << "the record was skipped or read";
  } catch (const BadRecord& e) {
    ADD_FAILURE() << "a bad record: " << e.what();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("mismatch.jsonl:1: field 'dialogue'"), std::string::npos) << e.what();
  }
}

TEST(Dataset, JsonLinesRoundTripAsPretokenizedRecords) {
  Example example;
  example.id = "13818513";
  example.input_ids = {12636, 397, 1};
  example.labels = Ids{107, 1};
  std::string text;
  append_json_line(text, example);
  EXPECT_EQ(text, "{\"id\":\"13818513\",\"input_ids\":[12636,397,1],\"labels\":[107,1]}\n");
  Example masked;
  masked.input_ids = {5, 1};
  masked.attention_mask = {1, 0};
  append_json_line(text, masked);
  const std::vector<Example> read_back = read_examples(write_file("round.jsonl", text), pegasus(), {});
  ASSERT_EQ(read_back.size(), 2u);
  EXPECT_EQ(read_back[0].id, "13818513");
  EXPECT_EQ(read_back[0].input_ids, example.input_ids);
  EXPECT_EQ(*read_back[0].labels, *example.labels);
  EXPECT_EQ(read_back[1].attention_mask, masked.attention_mask);
  EXPECT_FALSE(read_back[1].labels);
}

TEST(Dataset, ClampsLengthsToTheModelWithAWarning) {
  DataOptions options;
  options.max_source_length = 2048;
  options.max_target_length = 128;
  const std::vector<std::string> warnings = clamp_lengths_to_model(options, 1024);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "max_source_length 2048 is above the model's max_position_embeddings 1024; using 1024");
  EXPECT_EQ(options.max_source_length, 1024);
  EXPECT_EQ(options.max_target_length, 128);
  EXPECT_TRUE(clamp_lengths_to_model(options, 1024).empty());
}

TEST(Dataset, ValidationExplainsTheProblem) {
  DataOptions options;
  EXPECT_NO_THROW(options.validate());
  options.max_source_length = 0;
  EXPECT_THROW(options.validate(), std::invalid_argument);
  options = DataOptions{};
  options.summary_column = "dialogue";
  EXPECT_THROW(options.validate(), std::invalid_argument);
  options = DataOptions{};
  options.max_tokens_per_batch = 512;
  try {
    options.validate();
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("max_tokens_per_batch 512 is below the longest possible example (1024"),
              std::string::npos);
  }
  options.max_tokens_per_batch = 4096;
  options.group_by_length = true;
  EXPECT_THROW(options.validate(), std::invalid_argument);
}

// run_summarization.py truncates with the tokenizer's truncation=True, which keeps the special tokens and cuts the
// text, down to nothing: with max_source_length 1 a PEGASUS or T5 input is </s> alone, a BART one needs 2 (<s> </s>).
// Such records are trained on, not taken for empty ones (before: every record "with empty text", then dropped).
TEST(Dataset, TinyMaxLengthsKeepTheSpecialTokensAsHuggingFacesTruncationDoes) {
  const tokenizer::T5Tokenizer t5(test::source_dir() / "data" / "pegasus" / "spiece.model");
  const auto bart = tokenizer::BartTokenizer::from_folder(test::source_dir() / "data" / "gpt2");
  const fs::path file = write_file("tiny.jsonl",
                                   "{\"dialogue\": \"" + kEric + "\", \"summary\": \"" + kHannah + "\"}\n"
                                   "{\"dialogue\": \"\", \"summary\": \"empty text\"}\n"
                                   "{\"dialogue\": \"no summary\", \"summary\": \"\"}\n");
  struct Case {
    const tokenizer::Tokenizer* tokenizer;
    std::int64_t length;  // the smallest max length: the template alone
  };
  for (const Case c : {Case{&pegasus(), 1}, Case{&t5, 1}, Case{&bart, 2}}) {
    const std::string name(c.tokenizer->name());
    for (const std::int64_t length : {c.length, c.length + 1}) {
      DataOptions options;
      options.max_source_length = length;
      options.max_target_length = length;
      ReadStats stats;
      auto examples = read_examples(file, c.tokenizer, c.tokenizer->vocab_size(), options, std::nullopt, &stats);
      ASSERT_EQ(examples.size(), 3u) << name;
      const Ids eric = c.tokenizer->encode(kEric);
      Ids expected(eric.begin(), eric.begin() + (length - 1));  // BART's <s> and what text fits, then </s>
      expected.push_back(c.tokenizer->eos_id());
      EXPECT_EQ(examples[0].input_ids, expected) << name << " " << length;
      EXPECT_EQ(examples[0].labels->size(), static_cast<std::size_t>(length)) << name;
      EXPECT_EQ(examples[0].input_ids.size(), static_cast<std::size_t>(length)) << name;
      EXPECT_EQ(stats.empty_text, 1u) << name << " " << length;  // the empty dialogue only
      EXPECT_EQ(stats.truncated_sources, 2u) << name << " " << length;
      EXPECT_EQ(drop_empty_examples(examples, c.tokenizer->encode("")), 2u) << name << " " << length;
      ASSERT_EQ(examples.size(), 1u) << name;
      EXPECT_EQ(examples[0].line, 1u) << name;
    }
  }
  // Below BART's template, Hugging Face's tokenizers leave the text untruncated: refused, naming the flag.
  DataOptions options;
  options.max_target_length = 1;
  try {
    ExampleReader reader(file, bart, options);
    FAIL() << "expected max_target_length 1 to be refused for BART";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("max_target_length 1 is below the 2 special tokens BartTokenizer puts "
                                          "around every summary (<s> </s>)",
                                          0),
              0u)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("use max_target_length 2 or more"), std::string::npos) << e.what();
  }
  options = DataOptions{};
  options.max_source_length = 1;
  EXPECT_THROW(options.validate_for(bart), std::invalid_argument);
  EXPECT_NO_THROW(options.validate_for(pegasus()));
  EXPECT_NO_THROW(options.validate_for(t5));
  EXPECT_EQ(t5.encode("hello world", 1), (Ids{1}));
}

}  // namespace
}  // namespace fitsum::data
