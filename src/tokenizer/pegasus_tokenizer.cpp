// Implements include/fitsum/tokenizer/pegasus_tokenizer.h. The reference is transformers' PegasusTokenizer
// (tokenization_pegasus.py) on top of PreTrainedTokenizer.tokenize / _decode (tokenization_utils.py).
#include "fitsum/tokenizer/pegasus_tokenizer.h"

#include <stdexcept>

#include "fitsum/tokenizer/python_text.h"
#include "fitsum/tokenizer/tokenizer_json.h"
#include "fitsum/util/files.h"

namespace fitsum::tokenizer {

namespace {

constexpr TokenId kFirstReservedUnk = 2;   // <unk_2> has id 4
constexpr TokenId kLastReservedUnk = 102;  // <unk_102> has id 104

// The id of a special-token string, or -1. Every special token is "<...>" with no other '<' or '>', so none is
// a substring of another and matching at the leftmost '<' is what HF's trie does.
TokenId special_token_id(std::string_view token) {
  if (token == "<pad>") return PegasusTokenizer::kPadId;
  if (token == "</s>") return PegasusTokenizer::kEosId;
  if (token == "<mask_1>") return PegasusTokenizer::kMaskSentenceId;
  if (token == "<mask_2>") return PegasusTokenizer::kMaskId;
  if (token == "<unk>") return PegasusTokenizer::kUnkId;
  constexpr std::string_view prefix = "<unk_";
  if (token.size() < prefix.size() + 2 || token.substr(0, prefix.size()) != prefix || token.back() != '>') {
    return -1;
  }
  const std::string_view digits = token.substr(prefix.size(), token.size() - prefix.size() - 1);
  if (digits.size() > 3 || digits[0] == '0') {
    return -1;  // "<unk_02>" is not a token
  }
  TokenId number = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') {
      return -1;
    }
    number = number * 10 + (c - '0');
  }
  if (number < kFirstReservedUnk || number > kLastReservedUnk) {
    return -1;
  }
  return number + 2;
}

std::string special_token_string(TokenId id) {
  switch (id) {
    case PegasusTokenizer::kPadId:
      return "<pad>";
    case PegasusTokenizer::kEosId:
      return "</s>";
    case PegasusTokenizer::kMaskSentenceId:
      return "<mask_1>";
    case PegasusTokenizer::kMaskId:
      return "<mask_2>";
    case PegasusTokenizer::kUnkId:
      return "<unk>";
    default:
      return "<unk_" + std::to_string(id - 2) + ">";
  }
}

}  // namespace

fs::path PegasusTokenizer::tokenizer_file(const fs::path& dir) {
  std::error_code error;
  for (const char* name : {"spiece.model", "tokenizer.json"}) {
    if (fs::exists(fs::symlink_status(dir / name, error))) return dir / name;
  }
  return {};
}

PegasusTokenizer PegasusTokenizer::from_folder(const fs::path& dir) {
  const fs::path file = tokenizer_file(dir);
  if (file.empty()) {
    throw std::runtime_error("no spiece.model or tokenizer.json in '" + dir.string() +
                             "': fitsum needs the tokenizer of a PEGASUS checkpoint; copy it there or pass "
                             "tokenizer_name with a folder that has one");
  }
  return PegasusTokenizer(file);
}

namespace {

SentencePieceModel load_model(const fs::path& file) {
  // Both refuse a FIFO, folder or device by name: the SentencePieceModel constructor, and require_regular_file here.
  if (file.filename() != "tokenizer.json") return SentencePieceModel(file);
  util::require_regular_file(file, "the tokenizer");
  return SentencePieceModel::from_serialized(pegasus_sentencepiece_from_tokenizer_json(file, PegasusTokenizer::kOffset),
                                             file);
}

}  // namespace

PegasusTokenizer::PegasusTokenizer(const fs::path& model_file) : model_(load_model(model_file)) {
  // HF's fixed layout assumes PEGASUS's pieces: <pad> and </s> (never produced) and <unk> at 2, so that an
  // unknown piece lands on 105, the id of the literal "<unk>" token.
  if (model_.unk_id() + kOffset != kUnkId || !model_.is_control(0) || !model_.is_control(1)) {
    throw std::runtime_error("'" + model_file.string() +
                             "' does not have PEGASUS's piece layout (<pad> 0, </s> 1, <unk> 2; found <unk> at " +
                             std::to_string(model_.unk_id()) + "): it is not a PEGASUS spiece.model");
  }
  vocab_size_ = model_.piece_size() + kOffset;
}

void PegasusTokenizer::encode_without_eos(std::string_view text, std::vector<TokenId>& ids) const {
  const auto encode_plain = [&](std::string_view chunk) {
    if (chunk.empty()) {
      return;
    }
    const std::size_t start = ids.size();
    model_.encode(chunk, ids);
    for (std::size_t i = start; i < ids.size(); ++i) {
      ids[i] += kOffset;
    }
  };
  // Split out literal special tokens first, as HF's slow tokenizer does (its added tokens are AddedToken with
  // lstrip = rstrip = false, so the neighbouring text keeps its spaces; SentencePiece drops them anyway).
  std::size_t chunk_start = 0;
  std::size_t open = text.find('<');
  while (open != std::string_view::npos) {
    const std::size_t close = text.find('>', open + 1);
    if (close == std::string_view::npos) {
      break;
    }
    const TokenId special = special_token_id(text.substr(open, close - open + 1));
    if (special >= 0) {
      encode_plain(text.substr(chunk_start, open - chunk_start));
      ids.push_back(special);
      chunk_start = close + 1;
      open = text.find('<', chunk_start);
    } else {
      open = text.find('<', open + 1);
    }
  }
  encode_plain(text.substr(chunk_start));
}

// The ids of a prefix of `text` that holds at least `wanted` ids, or of all of it. Each try ends at a space, so its
// ids are those the whole text starts with; the prefix doubles until it has enough.
void PegasusTokenizer::encode_prefix(std::string_view text, std::size_t wanted, std::vector<TokenId>& ids) const {
  constexpr std::size_t kFirstTry = 4096;
  std::size_t window = wanted > kFirstTry / 8 ? (wanted > text.size() / 8 ? text.size() : wanted * 8) : kFirstTry;
  for (;;) {
    ids.clear();
    if (window >= text.size()) {
      encode_without_eos(text, ids);
      return;
    }
    std::size_t cut = text.rfind(' ', window);
    if (cut == std::string_view::npos || cut == 0) {
      if (window < kLongestWordBytes) {
        window = std::min(text.size(), window * 2);
        continue;
      }
      cut = window;  // one endless run: cut it at a character boundary
      while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    }
    encode_without_eos(text.substr(0, cut), ids);
    if (ids.size() >= wanted) return;
    window = window > text.size() / 2 ? text.size() : window * 2;
  }
}

std::vector<TokenId> PegasusTokenizer::encode(std::string_view text, std::optional<std::size_t> max_length,
                                              bool* truncated) const {
  std::vector<TokenId> ids;
  if (max_length) {
    if (*max_length == 0) {
      throw std::invalid_argument("a maximum length of 0 leaves no room for </s>; use at least 1");
    }
    encode_prefix(text, *max_length, ids);  // max_length ids without </s>: enough to know whether it is cut
  } else {
    encode_without_eos(text, ids);
  }
  ids.push_back(kEosId);
  const bool cut = max_length && truncate_keeping_eos(ids, *max_length);
  if (truncated != nullptr) *truncated = cut;
  return ids;
}

std::string PegasusTokenizer::decode(const std::vector<TokenId>& ids, const DecodeOptions& options) const {
  // As PegasusTokenizer.convert_tokens_to_string: runs of pieces go through SentencePiece, special tokens are
  // pasted between them verbatim (or dropped), and the whole is stripped.
  std::string text;
  std::vector<TokenId> pieces;
  const auto flush = [&]() {
    if (!pieces.empty()) {
      text += model_.decode(pieces);
      pieces.clear();
    }
  };
  for (const TokenId id : ids) {
    check_token_id(id, vocab_size_);
    if (is_special(id)) {
      if (!options.skip_special_tokens) {
        flush();
        text += special_token_string(id);
      }
    } else {
      pieces.push_back(id - kOffset);
    }
  }
  flush();
  text = python_strip(text);
  return options.clean_up_tokenization_spaces ? clean_up_tokenization(std::move(text)) : text;
}

std::string PegasusTokenizer::id_to_token(TokenId id) const {
  check_token_id(id, vocab_size_);
  return is_special(id) ? special_token_string(id) : model_.id_to_piece(id - kOffset);
}

}  // namespace fitsum::tokenizer
