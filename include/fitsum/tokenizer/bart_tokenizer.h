// BART's tokenizer with Hugging Face's behaviour (transformers' slow BartTokenizer, 4.35): GPT-2's byte-level BPE
// (byte_level_bpe.h) from vocab.json + merges.txt, or from tokenizer.json when a folder has only that.
//   - encode: <s> text </s>; special-token strings in the text (<s>, </s>, <unk>, <pad>, <mask>) become their ids,
//     <mask> eating the whitespace before it (lstrip), the others none; truncation keeps <s> and </s>.
//   - special ids: the vocabulary's own (facebook/bart-*: <s> 0, <pad> 1, </s> 2, <unk> 3, <mask> 50264); tokens the
//     vocabulary lacks (GPT-2's files) are appended after it in HF's order <s>, </s>, <unk>, <pad>, <mask>.
//   - decode: special ids dropped (skip_special_tokens), bytes decoded as UTF-8 with U+FFFD for invalid sequences,
//     HF's clean_up_tokenization; no stripping (a leading space stays).
// tokenizer_config.json's add_prefix_space is honoured (false by default, as in BART's checkpoints).
#pragma once

#include "fitsum/tokenizer/added_tokens.h"
#include "fitsum/tokenizer/byte_level_bpe.h"
#include "fitsum/tokenizer/tokenizer.h"

namespace fitsum::tokenizer {

struct BartTokenizerOptions {
  bool add_prefix_space = false;
};

class BartTokenizer : public Tokenizer {
 public:
  // vocab.json + merges.txt, else tokenizer.json (its added_tokens give the special ids and flags); throws
  // std::runtime_error naming the folder when it has neither.
  static BartTokenizer from_folder(const fs::path& dir);
  explicit BartTokenizer(ByteLevelBpe bpe, BartTokenizerOptions options = {});

  std::string_view name() const override { return "BartTokenizer"; }
  TokenId vocab_size() const override { return vocab_size_; }
  TokenId pad_id() const override { return pad_id_; }
  TokenId eos_id() const override { return eos_id_; }
  TokenId bos_id() const { return bos_id_; }
  TokenId unk_id() const { return unk_id_; }
  TokenId mask_id() const { return mask_id_; }
  bool is_special(TokenId id) const override;

  std::vector<TokenId> encode(std::string_view text, std::optional<std::size_t> max_length = std::nullopt,
                              bool* truncated = nullptr) const override;
  using Tokenizer::decode;
  std::string decode(const std::vector<TokenId>& ids, const DecodeOptions& options = {}) const override;
  std::string id_to_token(TokenId id) const override;

  // Replaces the special tokens' ids and flags with those a tokenizer.json lists.
  void use_added_tokens(const std::vector<AddedToken>& tokens);

 private:
  void add_special(const std::string& content, TokenId& id, bool lstrip);

  ByteLevelBpe bpe_;
  BartTokenizerOptions options_;
  AddedTokens added_;
  TokenId vocab_size_ = 0;
  TokenId bos_id_ = 0, eos_id_ = 0, unk_id_ = 0, pad_id_ = 0, mask_id_ = 0;
};

}  // namespace fitsum::tokenizer
