// The tokenizer interface that data loading, training, evaluation and the command-line tools use, whatever the
// model family: PEGASUS (SentencePiece with 103 reserved ids), BART (GPT-2 byte-level BPE, <s> ... </s>) and T5
// (SentencePiece with 100 <extra_id_*> tokens). Each implementation reproduces the slow Hugging Face tokenizer of
// its family (transformers 4.35): the same ids for encode(text) with add_special_tokens and truncation=True, the
// same text for decode(ids).
//
// families::load_tokenizer(dir) (families/family.h) opens a folder's tokenizer: the family registry says which class
// reads it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fitsum::tokenizer {

namespace fs = std::filesystem;

using TokenId = std::int32_t;

struct DecodeOptions {
  bool skip_special_tokens = true;           // drop the family's special ids (HF's all_special_ids)
  bool clean_up_tokenization_spaces = true;  // HF's default for all three families
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // HF's class name: "PegasusTokenizer", "BartTokenizer", "T5Tokenizer".
  virtual std::string_view name() const = 0;
  // len(tokenizer): every id encode can produce is below it.
  virtual TokenId vocab_size() const = 0;
  virtual TokenId pad_id() const = 0;
  virtual TokenId eos_id() const = 0;
  virtual bool is_special(TokenId id) const = 0;

  // Token ids of `text` in the family's template (PEGASUS and T5: text </s>; BART: <s> text </s>). With
  // `max_length`, text ids are cut from the end so that the whole, template included, fits, as HF's
  // truncation=True does, and `*truncated` (when given) says whether anything was cut; a max_length below the
  // template's own length throws std::invalid_argument.
  virtual std::vector<TokenId> encode(std::string_view text, std::optional<std::size_t> max_length = std::nullopt,
                                      bool* truncated = nullptr) const = 0;

  // Text of `ids`; throws std::invalid_argument for an id outside 0 .. vocab_size()-1 (e.g. label padding -100).
  virtual std::string decode(const std::vector<TokenId>& ids, const DecodeOptions& options = {}) const = 0;
  std::string decode(const std::vector<std::int64_t>& ids, const DecodeOptions& options = {}) const;

  // The token string of an id ("<pad>", "▁the", "Ġthe", "<extra_id_0>", ...).
  virtual std::string id_to_token(TokenId id) const = 0;

  // Whether `ids` is what encode("") gives: an empty text in the family's template.
  bool is_empty_text(const std::vector<TokenId>& ids) const;
};

// Whether `dir` holds files families::load_tokenizer can read: spiece.model, tokenizer.json, or vocab.json and merges.txt.
bool has_tokenizer(const fs::path& dir);
// What a folder without a tokenizer lacks, for messages: "spiece.model, tokenizer.json or vocab.json + merges.txt".
inline constexpr const char* kTokenizerFiles = "spiece.model, tokenizer.json or vocab.json + merges.txt";

// Throws std::invalid_argument when `id` is outside 0 .. vocab_size-1.
void check_token_id(std::int64_t id, TokenId vocab_size);

// Shortens `ids` (which end in </s>) to `max_length` ids, keeping </s> last, as HF's truncation=True does.
// Returns whether anything was cut; max_length must be at least 1.
bool truncate_keeping_eos(std::vector<TokenId>& ids, std::size_t max_length);

// HF's PreTrainedTokenizerBase.clean_up_tokenization: removes the space before . ? ! , and English contractions.
std::string clean_up_tokenization(std::string text);

}  // namespace fitsum::tokenizer
