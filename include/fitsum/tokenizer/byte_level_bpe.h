// GPT-2's byte-level BPE, the model under BART's tokenizer (transformers' GPT2Tokenizer / BartTokenizer, 4.35):
// the text is cut into words by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (matched with PCRE2, where \s is Unicode's White_Space property, as in the Python `regex` module that HF uses:
// U+0085 is a space, U+001C..U+001F are not), each word's UTF-8 bytes are mapped to printable characters
// (bytes_to_unicode), and the merges are applied, lowest rank first, until none applies.
// The vocabulary and merges come from vocab.json + merges.txt or from a tokenizer.json of type BPE.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace fitsum::tokenizer {

namespace fs = std::filesystem;

// GPT-2's pre-tokenizer pattern, compiled once; thread-safe.
class GptPretokenizer {
 public:
  GptPretokenizer();
  // The words of `text` in order (they concatenate to `text`). Throws std::invalid_argument naming the byte
  // offset when `text` is not valid UTF-8.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  std::shared_ptr<void> code_;  // pcre2_code_8
};

class ByteLevelBpe {
 public:
  using Merge = std::pair<std::string, std::string>;

  ByteLevelBpe(std::unordered_map<std::string, std::int32_t> vocab, const std::vector<Merge>& merges);
  // vocab.json (token -> id) and merges.txt as GPT2Tokenizer reads it: the first line (the "#version" header) and
  // the last (empty after the final newline) are skipped. Throws std::runtime_error naming the file.
  ByteLevelBpe(ByteLevelBpe&&) = default;
  ByteLevelBpe(const ByteLevelBpe&) = delete;  // by_id_ points into vocab_
  ByteLevelBpe& operator=(const ByteLevelBpe&) = delete;

  static ByteLevelBpe from_files(const fs::path& vocab_json, const fs::path& merges_txt);
  // The "model" object of a tokenizer.json ("type": "BPE"); `file` names it in errors.
  static ByteLevelBpe from_tokenizer_json(const nlohmann::json& model, const fs::path& file);

  // Appends the BPE tokens (byte-level strings such as "Ġthe") of `text`, stopping after the word that brings
  // `tokens` to `max_tokens` or more (words are merged independently, so those tokens are the whole text's first).
  void tokenize(std::string_view text, std::vector<std::string>& tokens,
                std::size_t max_tokens = std::numeric_limits<std::size_t>::max()) const;

  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  // nullptr for an id the vocabulary does not have.
  const std::string* id_to_token(std::int32_t id) const;
  // len(vocab.json)
  std::int32_t size() const { return static_cast<std::int32_t>(vocab_.size()); }

  // The text of byte-level tokens: their characters mapped back to bytes, decoded as UTF-8 with U+FFFD for
  // invalid sequences (errors="replace"). Throws std::invalid_argument for a character outside the byte map.
  static std::string tokens_to_text(const std::vector<std::string>& tokens);

 private:
  std::vector<std::string> merge_word(const std::string& word) const;

  std::unordered_map<std::string, std::int32_t> vocab_;
  std::unordered_map<std::int32_t, const std::string*> by_id_;
  std::unordered_map<std::string, std::size_t> ranks_;  // "first second" -> rank
  GptPretokenizer pretokenizer_;
  // Merged words, as GPT2Tokenizer's cache; shared by copies, guarded by its own mutex.
  struct WordCache {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<std::string>> words;
  };
  std::shared_ptr<WordCache> cache_ = std::make_shared<WordCache>();
};

}  // namespace fitsum::tokenizer
