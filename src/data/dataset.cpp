// Implements include/fitsum/data/dataset.h. The reference is run_summarization.py's preprocess_function:
// tokenizer(inputs, max_length=max_source_length, truncation=True) and
// tokenizer(text_target=targets, max_length=max_target_length, truncation=True), without padding (the collator
// pads per batch).
#include "fitsum/data/dataset.h"

#include <algorithm>
#include <charconv>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "fitsum/util/files.h"

namespace fitsum::data {

namespace {

constexpr std::size_t kSkippedMessagesKept = 5;
constexpr TokenId kLabelPadId = -100;  // HF's ignore index, allowed in pre-tokenized labels

std::string field_names(const nlohmann::json& fields) {
  std::string names;
  for (const auto& item : fields.items()) {
    names += (names.empty() ? "" : ", ") + item.key();
  }
  return names.empty() ? "none" : names;
}

class RecordContext {
 public:
  RecordContext(const fs::path& file, const Record& record) : file_(file), record_(record) {}

  BadRecord bad(const std::string& field, const std::string& message) const {
    return BadRecord(where(field) + message);
  }

  std::string where(const std::string& field) const {
    return file_.string() + ":" + std::to_string(record_.line) + ": field '" + field + "': ";
  }

  // A string field; missing or another type is a BadRecord naming the fields the record has.
  const std::string& text(const std::string& field, const char* flag) const {
    const auto it = record_.fields.find(field);
    if (it == record_.fields.end()) {
      throw bad(field, std::string("missing; the record has ") + field_names(record_.fields) +
                           " (choose the column with " + flag + ")");
    }
    if (!it->is_string()) {
      throw bad(field, std::string("expected a string, found ") + it->type_name());
    }
    return it->get_ref<const std::string&>();
  }

  // A list of token ids: a JSON array of integers, or a csv cell holding one ("[1, 2, 3]").
  std::vector<TokenId> ids(const std::string& field, TokenId vocab_size, bool allow_label_padding) const {
    const nlohmann::json& value = record_.fields.at(field);
    nlohmann::json parsed;
    if (value.is_string()) {
      try {
        parsed = util::parse_json(value.get_ref<const std::string&>(), field);
      } catch (const util::JsonError&) {
        // not a list: reported below with the field's type
      }
    }
    const nlohmann::json& list = value.is_string() ? parsed : value;
    if (!list.is_array()) {
      throw bad(field, std::string("expected a list of token ids, found ") + value.type_name());
    }
    std::vector<TokenId> ids;
    ids.reserve(list.size());
    for (const auto& item : list) {
      if (!item.is_number_integer()) {
        throw bad(field, std::string("expected integer token ids, found ") + item.type_name());
      }
      const std::int64_t id = item.get<std::int64_t>();
      if ((id < 0 || id >= vocab_size) && !(allow_label_padding && id == kLabelPadId)) {
        throw bad(field, "token id " + std::to_string(id) + " is outside the vocabulary 0.." +
                             std::to_string(vocab_size - 1) + " (tokenized with another tokenizer?)");
      }
      ids.push_back(static_cast<TokenId>(id));
    }
    return ids;
  }

  bool has(const std::string& field) const {
    const auto it = record_.fields.find(field);
    return it != record_.fields.end() && !it->is_null();
  }

 private:
  const fs::path& file_;
  const Record& record_;
};

void check_pretokenized_length(const RecordContext& context, const std::string& field, std::size_t size,
                               std::int64_t limit, const char* flag) {
  if (size == 0) {
    throw context.bad(field, "is empty; a tokenized sequence has at least </s>");
  }
  if (static_cast<std::int64_t>(size) > limit) {
    throw context.bad(field, "has " + std::to_string(size) + " tokens, more than " + flag + " " +
                                 std::to_string(limit) + "; pre-tokenized data is used as it is, so raise " + flag +
                                 " or truncate when tokenizing");
  }
}

// The ids of a tokenizer larger than the model's vocabulary (tokenizer_name of another model) would reach past the
// embedding table, which LibTorch reports as "index out of range in self" from inside the forward pass. Not a bad
// record that skip_bad_records may drop: every record would be, so the run stops naming both sizes.
void check_ids_fit_the_model(const RecordContext& context, const std::string& field, const std::vector<TokenId>& ids,
                             const tokenizer::Tokenizer& tokenizer, std::int64_t vocab_size) {
  if (tokenizer.vocab_size() <= vocab_size) return;
  const auto outside = std::find_if(ids.begin(), ids.end(), [&](TokenId id) { return id >= vocab_size; });
  if (outside == ids.end()) return;
  throw std::runtime_error(context.where(field) + "the tokenizer gives token id " + std::to_string(*outside) +
                           ", outside the model's vocabulary 0.." + std::to_string(vocab_size - 1) +
                           " (the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                           " ids, the model's config.json vocab_size is " + std::to_string(vocab_size) +
                           "); the tokenizer belongs to another model: pass this model's own with tokenizer_name");
}

}  // namespace

void DataOptions::validate_values() const {
  if (text_column.empty() || summary_column.empty()) {
    throw std::invalid_argument("text_column and summary_column must name a column");
  }
  if (text_column == summary_column) {
    throw std::invalid_argument("text_column and summary_column are both '" + text_column +
                                "'; the summary must come from another column");
  }
  for (const auto& [field, value, ends] : {std::tuple{"max_source_length", max_source_length, "input"},
                                           std::tuple{"max_target_length", max_target_length, "summary"}}) {
    if (value < 1) {
      throw std::invalid_argument(std::string(field) + " is " + std::to_string(value) +
                                  "; it must be at least 1, the </s> that ends every " + ends);
    }
    if (value > kMaxLength) {
      throw std::invalid_argument(std::string(field) + " is " + std::to_string(value) + ", more than the " +
                                  std::to_string(kMaxLength) + " tokens fitsum accepts");
    }
  }
  for (const auto& [field, value] :
       {std::pair{"max_train_samples", max_train_samples}, std::pair{"max_eval_samples", max_eval_samples},
        std::pair{"max_predict_samples", max_predict_samples}}) {
    if (value && *value < 1) throw std::invalid_argument(std::string(field) + " must be at least 1");
  }
  if (pad_to_multiple_of && (*pad_to_multiple_of < 1 || *pad_to_multiple_of > kMaxLength)) {
    throw std::invalid_argument("pad_to_multiple_of must be in [1, " + std::to_string(kMaxLength) + "], got " +
                                std::to_string(*pad_to_multiple_of));
  }
  if (max_tokens_per_batch && (*max_tokens_per_batch < 1 || *max_tokens_per_batch > kMaxLength * kMaxLength)) {
    throw std::invalid_argument("max_tokens_per_batch must be in [1, 2^48], got " +
                                std::to_string(*max_tokens_per_batch));
  }
}

void DataOptions::validate() const {
  validate_values();
  if (max_tokens_per_batch) {
    const std::int64_t longest = std::max(max_source_length, max_target_length);
    if (*max_tokens_per_batch < longest) {
      throw std::invalid_argument("max_tokens_per_batch " + std::to_string(*max_tokens_per_batch) +
                                  " is below the longest possible example (" + std::to_string(longest) +
                                  " tokens, from max_source_length/max_target_length), which would fit no batch");
    }
    if (group_by_length) {
      throw std::invalid_argument(
          "group_by_length and max_tokens_per_batch both choose how examples are grouped; use one of them");
    }
  }
}

void DataOptions::validate_for(const tokenizer::Tokenizer& tokenizer) const {
  validate();
  const auto template_ids = tokenizer.encode("");
  const auto special = static_cast<std::int64_t>(template_ids.size());
  std::string names;
  for (const auto id : template_ids) names += (names.empty() ? "" : " ") + tokenizer.id_to_token(id);
  const auto check = [&](std::int64_t length, const char* flag, const char* what) {
    if (length >= special) return;
    const std::string least = std::to_string(special);
    throw std::invalid_argument(std::string(flag) + " " + std::to_string(length) + " is below the " + least +
                                " special tokens " + std::string(tokenizer.name()) + " puts around every " + what +
                                " (" + names + "); Hugging Face's tokenizers then leave it untruncated, so the run " +
                                "could not honour the flag: use " + flag + " " + least + " or more (" + least +
                                " keeps " + names + " alone)");
  };
  check(max_source_length, "max_source_length", "text");
  check(max_target_length, "max_target_length", "summary");
}

std::vector<std::string> clamp_lengths_to_model(DataOptions& options, std::int64_t max_position_embeddings) {
  std::vector<std::string> warnings;
  const auto clamp = [&](std::int64_t& length, const char* flag) {
    if (max_position_embeddings > 0 && length > max_position_embeddings) {
      warnings.push_back(std::string(flag) + " " + std::to_string(length) +
                         " is above the model's max_position_embeddings " + std::to_string(max_position_embeddings) +
                         "; using " + std::to_string(max_position_embeddings));
      length = max_position_embeddings;
    }
  };
  clamp(options.max_source_length, "max_source_length");
  clamp(options.max_target_length, "max_target_length");
  return warnings;
}

std::string source_prefix_warning(const std::string& prefix_family, const DataOptions& options) {
  if (prefix_family.empty() || !options.source_prefix.empty()) return "";
  return "this is a " + prefix_family + " model and no --source_prefix is set; " + prefix_family +
         " expects its task prefix, e.g. --source_prefix 'summarize: '";
}

std::string ReadStats::summary(const DataOptions& options) const {
  std::ostringstream out;
  out << examples << " examples (" << with_labels << " with labels";
  if (pretokenized > 0) {
    out << ", " << pretokenized << " pre-tokenized";
  }
  out << ")";
  out << ", " << empty_text << " with empty text";
  out << ", " << truncated_sources << " sources truncated to " << options.max_source_length << " tokens";
  out << ", " << truncated_targets << " summaries truncated to " << options.max_target_length << " tokens";
  if (options.skip_bad_records || skipped_bad > 0) {
    out << ", " << skipped_bad << " malformed records skipped";
  }
  return out.str();
}

Example make_example(const Record& record, const fs::path& file, const tokenizer::Tokenizer& tokenizer,
                     const DataOptions& options, ReadStats* stats) {
  return make_example(record, file, &tokenizer, tokenizer.vocab_size(), options, stats);
}

Example make_example(const Record& record, const fs::path& file, const tokenizer::Tokenizer* tokenizer,
                     std::int64_t vocab_size, const DataOptions& options, ReadStats* stats) {
  const RecordContext context(file, record);
  Example example;
  example.line = record.line;
  if (const auto it = record.fields.find("id"); it != record.fields.end()) {
    example.id = *it;
  }
  ReadStats counts;
  if (context.has("input_ids")) {
    // Pre-tokenized (e.g. by `datasets`): used as it is, only checked.
    example.input_ids = context.ids("input_ids", vocab_size, false);
    check_pretokenized_length(context, "input_ids", example.input_ids.size(), options.max_source_length,
                              "max_source_length");
    if (context.has("attention_mask")) {
      example.attention_mask = context.ids("attention_mask", 2, false);
      if (example.attention_mask.size() != example.input_ids.size()) {
        throw context.bad("attention_mask", "has " + std::to_string(example.attention_mask.size()) + " entries for " +
                                                std::to_string(example.input_ids.size()) + " input_ids");
      }
    }
    if (context.has("labels")) {
      example.labels = context.ids("labels", vocab_size, true);
      check_pretokenized_length(context, "labels", example.labels->size(), options.max_target_length,
                                "max_target_length");
    }
    counts.pretokenized = 1;
    example.pretokenized = true;
  } else {
    const std::string& text = context.text(options.text_column, "text_column");
    if (tokenizer == nullptr) {
      throw context.bad(options.text_column,
                        std::string("is text, but no tokenizer was found (the model folder has no ") +
                            tokenizer::kTokenizerFiles + "): pass tokenizer_name DIR, or pre-tokenized records");
    }
    // Bounded by the maximum lengths: a 100 MB record costs what its first max_source_length tokens cost.
    bool cut = false;
    example.input_ids =
        tokenizer->encode(options.source_prefix + text, static_cast<std::size_t>(options.max_source_length), &cut);
    check_ids_fit_the_model(context, options.text_column, example.input_ids, *tokenizer, vocab_size);
    // Empty is judged on the text itself, as run_summarization.py filters before adding the prefix: a text that
    // was cut is not empty, though max_source_length 1 leaves it the ids of an empty one.
    const bool empty = options.source_prefix.empty() ? !cut && tokenizer->is_empty_text(example.input_ids)
                                                     : text.find_first_not_of(" \t\r\n") == std::string::npos;
    counts.empty_text = empty ? 1 : 0;
    counts.truncated_sources = cut ? 1 : 0;
    example.empty_text_or_summary = empty;
    if (record.fields.contains(options.summary_column)) {
      const std::string& summary = context.text(options.summary_column, "summary_column");
      example.labels = tokenizer->encode(summary, static_cast<std::size_t>(options.max_target_length), &cut);
      check_ids_fit_the_model(context, options.summary_column, *example.labels, *tokenizer, vocab_size);
      counts.truncated_targets = cut ? 1 : 0;
      example.empty_text_or_summary = empty || (!cut && tokenizer->is_empty_text(*example.labels));
    }
  }
  if (stats != nullptr) {
    stats->pretokenized += counts.pretokenized;
    stats->empty_text += counts.empty_text;
    stats->truncated_sources += counts.truncated_sources;
    stats->truncated_targets += counts.truncated_targets;
  }
  return example;
}

ExampleReader::ExampleReader(const fs::path& file, const tokenizer::Tokenizer& tokenizer, const DataOptions& options,
                             std::optional<std::int64_t> max_samples)
    : ExampleReader(file, &tokenizer, tokenizer.vocab_size(), options, max_samples) {}

ExampleReader::ExampleReader(const fs::path& file, const tokenizer::Tokenizer* tokenizer, std::int64_t vocab_size,
                             const DataOptions& options, std::optional<std::int64_t> max_samples)
    : records_(file), tokenizer_(tokenizer), vocab_size_(vocab_size), options_(options), max_samples_(max_samples) {
  if (tokenizer_ != nullptr) {
    options_.validate_for(*tokenizer_);
  } else {
    options_.validate();
  }
}

bool ExampleReader::next(Example& example) {
  if (max_samples_ && static_cast<std::int64_t>(stats_.examples) >= *max_samples_) {
    return false;
  }
  Record record;
  for (;;) {
    try {
      if (!records_.next(record)) {
        return false;
      }
      example = make_example(record, records_.file(), tokenizer_, vocab_size_, options_, &stats_);
    } catch (const BadRecord& e) {
      if (!options_.skip_bad_records) {
        throw BadRecord(std::string(e.what()) + " (skip_bad_records skips such records)");
      }
      ++stats_.skipped_bad;
      if (stats_.first_skipped.size() < kSkippedMessagesKept) {
        stats_.first_skipped.emplace_back(e.what());
      }
      continue;
    }
    ++stats_.examples;
    stats_.with_labels += example.labels ? 1 : 0;
    return true;
  }
}

std::vector<Example> read_examples(const fs::path& file, const tokenizer::Tokenizer& tokenizer,
                                   const DataOptions& options, std::optional<std::int64_t> max_samples,
                                   ReadStats* stats) {
  return read_examples(file, &tokenizer, tokenizer.vocab_size(), options, max_samples, stats);
}

std::vector<Example> read_examples(const fs::path& file, const tokenizer::Tokenizer* tokenizer, std::int64_t vocab_size,
                                   const DataOptions& options, std::optional<std::int64_t> max_samples,
                                   ReadStats* stats) {
  ExampleReader reader(file, tokenizer, vocab_size, options, max_samples);
  std::vector<Example> examples;
  Example example;
  while (reader.next(example)) {
    examples.push_back(std::move(example));
  }
  if (stats != nullptr) {
    *stats = reader.stats();
  }
  return examples;
}

void append_json_line(std::string& out, const Example& example) {
  const auto append_ids = [&](const char* key, const std::vector<TokenId>& ids) {
    out += key;
    out += '[';
    char number[16];
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) {
        out += ',';
      }
      const auto result = std::to_chars(number, number + sizeof(number), ids[i]);
      out.append(number, result.ptr);
    }
    out += ']';
  };
  out += '{';
  if (!example.id.is_null()) {
    out += "\"id\":";
    out += example.id.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out += ',';
  }
  append_ids("\"input_ids\":", example.input_ids);
  if (!example.attention_mask.empty()) {
    append_ids(",\"attention_mask\":", example.attention_mask);
  }
  if (example.labels) {
    append_ids(",\"labels\":", *example.labels);
  }
  out += "}\n";
}

std::size_t drop_empty_examples(std::vector<Example>& examples, const std::vector<TokenId>& empty_text_ids) {
  const std::size_t before = examples.size();
  examples.erase(std::remove_if(examples.begin(), examples.end(),
                                [&](const Example& example) {
                                  if (!example.pretokenized) return example.empty_text_or_summary;
                                  return example.input_ids == empty_text_ids ||
                                         (example.labels && *example.labels == empty_text_ids);
                                }),
                 examples.end());
  return before - examples.size();
}

}  // namespace fitsum::data
