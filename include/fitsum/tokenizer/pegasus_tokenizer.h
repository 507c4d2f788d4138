// PEGASUS's tokenizer with Hugging Face's id layout and behaviour (transformers' slow PegasusTokenizer, 4.3x):
//   0 <pad>, 1 </s>, 2 <mask_1>, 3 <mask_2>, 4..104 <unk_2>..<unk_102>, and SentencePiece piece k -> k + 103
//   (so <unk> -> 105, <n> -> 106); 96000 pieces give a 96103-id vocabulary.
// Encoding appends </s>; a special-token string found literally in the text ("<mask_1>", "</s>", "<unk>", ...)
// becomes that token's id, as HF's added-token splitting does, and the text between is encoded by SentencePiece.
// Decoding mirrors PegasusTokenizer.decode: special ids dropped (skip_special_tokens), outer whitespace stripped,
// and HF's clean_up_tokenization (" ." -> ".", " n't" -> "n't", ...).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fitsum/tokenizer/sentencepiece.h"
#include "fitsum/tokenizer/tokenizer.h"

namespace fitsum::tokenizer {

// skip_special_tokens drops ids 0..105 (<pad>, </s>, masks, <unk_k>, <unk>); PEGASUS's tokenizer_config.json sets
// clean_up_tokenization_spaces.
class PegasusTokenizer : public Tokenizer {
 public:
  static constexpr TokenId kPadId = 0;
  static constexpr TokenId kEosId = 1;
  static constexpr TokenId kMaskSentenceId = 2;   // <mask_1>
  static constexpr TokenId kMaskId = 3;           // <mask_2>
  static constexpr TokenId kOffset = 103;         // ids below are reserved; SentencePiece id k is k + kOffset
  static constexpr TokenId kUnkId = kOffset + 2;  // <unk>: SentencePiece's unknown piece 2

  // The file a folder's tokenizer is read from: spiece.model, else tokenizer.json (transformers 5 saves only that;
  // tokenizer_json.h); empty when it has neither.
  static fs::path tokenizer_file(const fs::path& dir);
  // Loads the folder's tokenizer_file(); throws std::runtime_error with a hint when the folder has none.
  static PegasusTokenizer from_folder(const fs::path& dir);
  // Loads a SentencePiece model with PEGASUS's piece layout (<pad> 0, </s> 1, <unk> 2), or the one rebuilt from a
  // file named tokenizer.json; throws otherwise.
  explicit PegasusTokenizer(const fs::path& model_file);

  std::string_view name() const override { return "PegasusTokenizer"; }
  TokenId vocab_size() const override { return vocab_size_; }  // pieces + 103 (96103 for PEGASUS)
  TokenId pad_id() const override { return kPadId; }
  TokenId eos_id() const override { return kEosId; }
  bool is_special(TokenId id) const override { return id >= 0 && id <= kUnkId; }
  const fs::path& model_file() const { return model_.file(); }  // spiece.model or tokenizer.json

  // Token ids of `text` followed by </s>. With `max_length`, keeps the first max_length - 1 ids and the </s>, as
  // HF's truncation=True does (max_length must be at least 1), and sets `*truncated` when given. The work is then
  // bounded by max_length, not by the text: growing prefixes of the text that end at a space are encoded until one
  // gives max_length ids (SentencePiece segments PEGASUS's text word by word, so those ids are the full text's).
  // Only a run of more than kLongestWordBytes bytes without a space is cut inside the run, where HF, encoding the
  // whole text, could segment the last ids differently.
  std::vector<TokenId> encode(std::string_view text, std::optional<std::size_t> max_length = std::nullopt,
                              bool* truncated = nullptr) const override;
  static constexpr std::size_t kLongestWordBytes = std::size_t{1} << 20;
  // Appends the token ids of `text` to `ids`, without </s>.
  void encode_without_eos(std::string_view text, std::vector<TokenId>& ids) const;

  // Text of `ids`; throws std::invalid_argument for an id outside 0 .. vocab_size()-1 (e.g. label padding -100).
  using Tokenizer::decode;
  std::string decode(const std::vector<TokenId>& ids, const DecodeOptions& options = {}) const override;

  // The token string of an id: "<pad>", "<unk_7>", "▁the", ...
  std::string id_to_token(TokenId id) const override;

 private:
  void encode_prefix(std::string_view text, std::size_t wanted, std::vector<TokenId>& ids) const;

  SentencePieceModel model_;
  TokenId vocab_size_ = 0;
};

}  // namespace fitsum::tokenizer
