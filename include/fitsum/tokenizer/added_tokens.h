// Hugging Face's "added tokens" in the slow tokenizers (transformers 4.35, PreTrainedTokenizer.tokenize): special
// token strings found literally in a text become their own ids before the model's tokenizer sees the rest, with
// each token's AddedToken flags: lstrip / rstrip eat the Python whitespace beside it, single_word refuses a match
// glued to a neighbouring word (the token's text then stays in that word). BART's <mask> has lstrip; T5's
// <extra_id_*> have lstrip, rstrip and single_word.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fitsum::tokenizer {

struct AddedToken {
  std::string content;
  std::int32_t id = 0;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

class AddedTokens {
 public:
  // A later token with the same content replaces the earlier one, as in HF's added-tokens encoder.
  void add(AddedToken token);
  const AddedToken* find(std::string_view content) const;
  const AddedToken* find(std::int32_t id) const;
  bool empty() const { return tokens_.empty(); }

  // A text cut into plain chunks (token == nullptr) and added tokens, in order; empty chunks are left out.
  struct Chunk {
    std::string text;
    const AddedToken* token = nullptr;
  };
  std::vector<Chunk> split(std::string_view text) const;

 private:
  // The leftmost, then longest, token occurrence at or after `from`; npos when there is none.
  std::size_t find_next(std::string_view text, std::size_t from, const AddedToken*& token) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, std::size_t> by_content_;
  std::unordered_map<std::int32_t, std::size_t> by_id_;
};

}  // namespace fitsum::tokenizer
