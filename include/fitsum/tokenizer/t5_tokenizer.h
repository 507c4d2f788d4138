// T5's tokenizer with Hugging Face's behaviour (transformers' slow T5Tokenizer, 4.35, legacy=True, the behaviour
// of every T5 / FLAN-T5 checkpoint's tokenizer_config): SentencePiece (the shim of sentencepiece.h) with the piece
// layout <pad> 0, </s> 1, <unk> 2, and `extra_ids` (100) sentinel tokens above the pieces, <extra_id_0> highest
// (t5-small: 32000 pieces, <extra_id_0> = 32099, <extra_id_99> = 32000).
//   - encode: text </s> (no </s> is added when the text already ends in one); literal <pad>, </s>, <unk> become their
//     ids; <extra_id_N> eats the whitespace on both sides and only stands alone (HF's lstrip, rstrip, single_word);
//     truncation keeps </s> last.
//   - decode: special ids dropped (skip_special_tokens, sentinels included), outer whitespace stripped, HF's
//     clean_up_tokenization. With skip_special_tokens false, sentinels are joined to the text with spaces and the
//     other special tokens pasted in, as HF's _decode / convert_tokens_to_string do.
#pragma once

#include "fitsum/tokenizer/added_tokens.h"
#include "fitsum/tokenizer/sentencepiece.h"
#include "fitsum/tokenizer/tokenizer.h"

namespace fitsum::tokenizer {

class T5Tokenizer : public Tokenizer {
 public:
  static constexpr TokenId kPadId = 0;
  static constexpr TokenId kEosId = 1;
  static constexpr TokenId kUnkId = 2;

  // Loads `dir/spiece.model`; `extra_ids` from tokenizer_config.json when it says (else 100).
  static T5Tokenizer from_folder(const fs::path& dir);
  // Throws std::runtime_error when the model's pieces 0, 1, 2 are not <pad>, </s>, <unk>.
  explicit T5Tokenizer(const fs::path& spiece_model, int extra_ids = 100);

  std::string_view name() const override { return "T5Tokenizer"; }
  TokenId vocab_size() const override { return piece_size_ + extra_ids_; }
  TokenId pad_id() const override { return kPadId; }
  TokenId eos_id() const override { return kEosId; }
  bool is_special(TokenId id) const override { return id <= kUnkId || id >= piece_size_; }
  // The id of <extra_id_n>: piece_size + extra_ids - 1 - n.
  TokenId sentinel_id(int n) const { return piece_size_ + extra_ids_ - 1 - n; }

  std::vector<TokenId> encode(std::string_view text, std::optional<std::size_t> max_length = std::nullopt,
                              bool* truncated = nullptr) const override;
  using Tokenizer::decode;
  std::string decode(const std::vector<TokenId>& ids, const DecodeOptions& options = {}) const override;
  std::string id_to_token(TokenId id) const override;

 private:
  // HF's T5Tokenizer.convert_tokens_to_string for a run of piece ids (specials pasted in, the rest decoded).
  std::string pieces_to_string(const std::vector<TokenId>& ids) const;

  SentencePieceModel model_;
  TokenId piece_size_ = 0;
  int extra_ids_ = 0;
  AddedTokens added_;
};

}  // namespace fitsum::tokenizer
