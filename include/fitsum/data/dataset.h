// Turns dataset records into tokenized seq2seq examples, as run_summarization.py's preprocessing does:
// the text column (default "dialogue") becomes input_ids truncated to max_source_length, the summary column
// (default "summary") becomes labels truncated to max_target_length, </s> always last. Records that already carry
// `input_ids` (and optionally `attention_mask`, `labels`), e.g. from `datasets`' map(tokenizer), are used as they
// are. Reading is streamed: ExampleReader holds one record at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fitsum/data/records.h"
#include "fitsum/tokenizer/tokenizer.h"

namespace fitsum::data {

using tokenizer::TokenId;

// The data flags, with run_summarization.py's / Seq2SeqTrainingArguments' names and defaults.
struct DataOptions {
  std::string text_column = "dialogue";
  std::string summary_column = "summary";
  std::string source_prefix;  // put before every text (run_summarization.py's source_prefix, e.g. for T5)
  std::int64_t max_source_length = 1024;
  std::int64_t max_target_length = 128;
  std::optional<std::int64_t> max_train_samples;
  std::optional<std::int64_t> max_eval_samples;
  std::optional<std::int64_t> max_predict_samples;
  bool skip_bad_records = false;                     // skip (and count) malformed records instead of failing
  std::optional<std::int64_t> pad_to_multiple_of;    // DataCollatorForSeq2Seq
  bool group_by_length = false;                      // LengthGroupedSampler
  std::optional<std::int64_t> max_tokens_per_batch;  // token-budget batches instead of a fixed batch size

  // Lengths and a padding multiple past this describe no sequence any machine holds; the bound keeps their sums and
  // round-ups within 64 bits.
  static constexpr std::int64_t kMaxLength = std::int64_t{1} << 24;

  // Throws std::invalid_argument with a sentence for the first value out of its range, each value on its own: what
  // can be checked before a model is loaded (whose positions may then lower the lengths).
  void validate_values() const;
  // validate_values(), then the values together (max_tokens_per_batch against the lengths, ...).
  void validate() const;
  // validate(), and the lengths against `tokenizer`'s template: a text is truncated to max_length minus the special
  // tokens around it, down to the special tokens alone (PEGASUS and T5: max_length 1 is </s>; BART: max_length 2 is
  // <s> </s>), as Hugging Face's tokenizers truncate. A max length below the template (BART's 1) is refused: those
  // tokenizers then leave the text untruncated, which is not what the flag asks for.
  void validate_for(const tokenizer::Tokenizer& tokenizer) const;
};

// Lowers max_source_length / max_target_length to the model's max_position_embeddings where they exceed it (the
// position table has no rows beyond it); returns one warning per change, for the caller to print.
std::vector<std::string> clamp_lengths_to_model(DataOptions& options, std::int64_t max_position_embeddings);

// run_summarization.py's warning for a model pretrained with a task prefix (T5 summarizes from "summarize: ") when no
// source_prefix is set. `prefix_family` names the model's family when it expects one (the caller asks the family
// registry: families::source_prefix_family), "" when it does not; empty when no warning is due.
std::string source_prefix_warning(const std::string& prefix_family, const DataOptions& options);

// One training or evaluation example. Token ids are stored as int32 (the vocabulary is 96103), halving the
// memory of a tokenized corpus; the collator widens them to int64 tensors.
struct Example {
  nlohmann::json id;                           // the record's "id" field, null when it has none
  std::vector<TokenId> input_ids;              // ends in </s> unless pre-tokenized otherwise
  std::vector<TokenId> attention_mask;         // empty: every input id is attended (the usual case)
  std::optional<std::vector<TokenId>> labels;  // absent when the record has no summary
  std::size_t line = 0;                        // where the record starts in its file
  bool pretokenized = false;                   // the record carried input_ids: there is no text to judge
  // A text record whose text or summary is empty (or blank), judged on the text as run_summarization.py judges it,
  // not on the ids: max_source_length 1 cuts every text to what an empty one encodes to.
  bool empty_text_or_summary = false;
};

// What a pass over a file did, for the log.
struct ReadStats {
  std::size_t examples = 0;
  std::size_t with_labels = 0;
  std::size_t pretokenized = 0;
  std::size_t empty_text = 0;  // text "" encodes to [</s>]; training may choose to drop these
  std::size_t truncated_sources = 0;
  std::size_t truncated_targets = 0;
  std::size_t skipped_bad = 0;
  std::vector<std::string> first_skipped;  // the messages of the first few skipped records

  // "14732 examples (14732 with labels), 1 with empty text, 12 sources truncated to 1024 tokens, ..."
  std::string summary(const DataOptions& options) const;
};

// Builds an example from one record. Throws BadRecord (message "file:line: field 'x': ...") when a field it
// needs is missing or has the wrong type or values. Counts what it did in `stats` when given (not `examples`).
Example make_example(const Record& record, const fs::path& file, const tokenizer::Tokenizer& tokenizer,
                     const DataOptions& options, ReadStats* stats = nullptr);
// The same without a tokenizer where the data is pre-tokenized (tokenizer may be null; a text record is then an
// error saying so), ids checked against the model's `vocab_size`.
Example make_example(const Record& record, const fs::path& file, const tokenizer::Tokenizer* tokenizer,
                     std::int64_t vocab_size, const DataOptions& options, ReadStats* stats = nullptr);

class ExampleReader {
 public:
  // `max_samples`: stop after that many examples (the first ones of the file).
  ExampleReader(const fs::path& file, const tokenizer::Tokenizer& tokenizer, const DataOptions& options,
                std::optional<std::int64_t> max_samples = std::nullopt);
  // `tokenizer` may be null for pre-tokenized files; ids are checked against `vocab_size`.
  ExampleReader(const fs::path& file, const tokenizer::Tokenizer* tokenizer, std::int64_t vocab_size,
                const DataOptions& options, std::optional<std::int64_t> max_samples = std::nullopt);

  // The next example; false at the end (or once max_samples were read). A malformed record throws BadRecord,
  // or, with options.skip_bad_records, is counted in stats() and passed over.
  bool next(Example& example);

  const ReadStats& stats() const { return stats_; }
  const fs::path& file() const { return records_.file(); }
  FileFormat format() const { return records_.format(); }

 private:
  RecordReader records_;
  const tokenizer::Tokenizer* tokenizer_;
  std::int64_t vocab_size_;
  DataOptions options_;
  std::optional<std::int64_t> max_samples_;
  ReadStats stats_;
};

// Reads a whole file into memory (a training set is held as token ids, not text).
std::vector<Example> read_examples(const fs::path& file, const tokenizer::Tokenizer& tokenizer,
                                   const DataOptions& options, std::optional<std::int64_t> max_samples = std::nullopt,
                                   ReadStats* stats = nullptr);
std::vector<Example> read_examples(const fs::path& file, const tokenizer::Tokenizer* tokenizer, std::int64_t vocab_size,
                                   const DataOptions& options, std::optional<std::int64_t> max_samples = std::nullopt,
                                   ReadStats* stats = nullptr);

// Appends `example` as one line of JSON (and '\n'): {"id": ..., "input_ids": [...], "attention_mask": [...],
// "labels": [...]}, "id" only when the record had one, "attention_mask" only when it came with the record,
// "labels" only with a summary. This is the pre-tokenized record format that make_example reads back.
void append_json_line(std::string& out, const Example& example);

// Removes the examples with an empty text or summary (SAMSum's train split has one empty dialogue): text records by
// Example::empty_text_or_summary, pre-tokenized ones whose input or labels are `empty_text_ids`, what the tokenizer
// makes of an empty text (PEGASUS, T5: </s>; BART: <s> </s>). run_summarization.py drops records with an empty text
// or summary before tokenizing; fitsum leaves the choice to the caller, which should log the count returned.
std::size_t drop_empty_examples(std::vector<Example>& examples, const std::vector<TokenId>& empty_text_ids);

}  // namespace fitsum::data
