// Implements include/fitsum/tokenizer/t5_tokenizer.h. The reference is transformers' T5Tokenizer (4.35,
// tokenization_t5.py, legacy=True) on PreTrainedTokenizer's tokenize / _decode (tokenization_utils.py).
#include "fitsum/tokenizer/t5_tokenizer.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "fitsum/tokenizer/python_text.h"
#include "fitsum/util/files.h"

namespace fitsum::tokenizer {

namespace {

std::string sentinel(int n) { return "<extra_id_" + std::to_string(n) + ">"; }

}  // namespace

T5Tokenizer T5Tokenizer::from_folder(const fs::path& dir) {
  if (!util::folder_has_file(dir, "spiece.model")) {
    throw std::runtime_error("no spiece.model in '" + dir.string() +
                             "': fitsum needs the SentencePiece model of a T5 checkpoint; copy it there or pass "
                             "--tokenizer_name with a folder that has one");
  }
  int extra_ids = 100;
  if (util::folder_has_file(dir, "tokenizer_config.json")) {
    const auto config_file = dir / "tokenizer_config.json";
    const auto config = util::read_json_file(config_file);
    if (config.is_object() && config.contains("extra_ids")) {
      // T5 and mT5 have 100; the bound keeps a hostile file from asking for billions of sentinel tokens.
      constexpr std::int64_t kMaxExtraIds = 100000;
      const auto& value = config["extra_ids"];
      if (!value.is_number_integer() || value.get<std::int64_t>() < 0 || value.get<std::int64_t>() > kMaxExtraIds) {
        throw std::runtime_error("'" + config_file.string() + "': extra_ids is " + value.dump() +
                                 ", not an integer in 0 .. " + std::to_string(kMaxExtraIds));
      }
      extra_ids = value.get<int>();
    }
  }
  return T5Tokenizer(dir / "spiece.model", extra_ids);
}

T5Tokenizer::T5Tokenizer(const fs::path& spiece_model, int extra_ids) : model_(spiece_model), extra_ids_(extra_ids) {
  if (extra_ids < 0) throw std::invalid_argument("extra_ids must not be negative");
  if (model_.piece_size() < 3 || model_.id_to_piece(kPadId) != "<pad>" || model_.id_to_piece(kEosId) != "</s>" ||
      model_.unk_id() != kUnkId) {
    throw std::runtime_error("'" + spiece_model.string() +
                             "' does not have T5's piece layout (<pad> 0, </s> 1, <unk> 2): it is not a T5 "
                             "spiece.model");
  }
  piece_size_ = model_.piece_size();
  added_.add({"<pad>", kPadId});
  added_.add({"</s>", kEosId});
  added_.add({"<unk>", kUnkId});
  for (int n = 0; n < extra_ids_; ++n) added_.add({sentinel(n), sentinel_id(n), true, true, true});
}

std::vector<TokenId> T5Tokenizer::encode(std::string_view text, std::optional<std::size_t> max_length,
                                         bool* truncated) const {
  if (max_length && *max_length < 1) {
    throw std::invalid_argument("a maximum length of 0 leaves no room for </s>; use at least 1");
  }
  std::vector<TokenId> ids;
  for (const auto& chunk : added_.split(text)) {
    if (chunk.token != nullptr) {
      ids.push_back(chunk.token->id);
    } else {
      model_.encode(chunk.text, ids);
    }
  }
  // truncate_sequences counts the one </s> the template adds, then build_inputs adds it unless already last. With
  // max_length 1 no text is left, only </s>, as the fast tokenizer's truncation leaves it.
  const bool cut = max_length && ids.size() + 1 > *max_length;
  if (truncated) *truncated = cut;
  if (cut) ids.resize(*max_length - 1);
  if (ids.empty() || ids.back() != kEosId) ids.push_back(kEosId);
  return ids;
}

std::string T5Tokenizer::id_to_token(TokenId id) const {
  check_token_id(id, vocab_size());
  return id >= piece_size_ ? sentinel(piece_size_ + extra_ids_ - 1 - id) : model_.id_to_piece(id);
}

std::string T5Tokenizer::pieces_to_string(const std::vector<TokenId>& ids) const {
  std::string out;
  bool previous_special = false;
  std::vector<TokenId> run;
  for (const TokenId id : ids) {
    if (id <= kUnkId) {  // <pad>, </s>, <unk>: pasted, not decoded by SentencePiece
      if (!previous_special) out += ' ';
      out += model_.decode(run) + model_.id_to_piece(id);
      run.clear();
      previous_special = true;
    } else {
      run.push_back(id);
      previous_special = false;
    }
  }
  out += model_.decode(run);
  return python_strip(out);
}

std::string T5Tokenizer::decode(const std::vector<TokenId>& ids, const DecodeOptions& options) const {
  // HF's _decode: sentinels (ids above the pieces) are "legacy added tokens", kept apart and joined with spaces.
  std::vector<std::string> parts;
  std::vector<TokenId> run;
  for (const TokenId id : ids) {
    check_token_id(id, vocab_size());
    if (options.skip_special_tokens && is_special(id)) continue;
    if (id >= piece_size_) {
      if (!run.empty()) {
        if (std::string text = pieces_to_string(run); !text.empty()) parts.push_back(std::move(text));
        run.clear();
      }
      parts.push_back(id_to_token(id));
    } else {
      run.push_back(id);
    }
  }
  if (!run.empty()) parts.push_back(pieces_to_string(run));
  std::string text;
  for (std::size_t i = 0; i < parts.size(); ++i) text += (i ? " " : "") + parts[i];
  return options.clean_up_tokenization_spaces ? clean_up_tokenization(std::move(text)) : text;
}

}  // namespace fitsum::tokenizer
