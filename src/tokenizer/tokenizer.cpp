// Implements include/fitsum/tokenizer/tokenizer.h: the functions all families share. Which family's tokenizer a
// folder holds is the family registry's choice (families::load_tokenizer).
#include "fitsum/tokenizer/tokenizer.h"

#include <stdexcept>

namespace fitsum::tokenizer {

namespace {

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  std::string out;
  std::size_t start = 0;
  for (std::size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, start)) {
    out.append(text, start, pos - start);
    out.append(to);
    start = pos + from.size();
  }
  if (start == 0) return;
  out.append(text, start, std::string::npos);
  text = std::move(out);
}

}  // namespace

std::string Tokenizer::decode(const std::vector<std::int64_t>& ids, const DecodeOptions& options) const {
  std::vector<TokenId> narrow;
  narrow.reserve(ids.size());
  for (const std::int64_t id : ids) {
    check_token_id(id, vocab_size());
    narrow.push_back(static_cast<TokenId>(id));
  }
  return decode(narrow, options);
}

bool Tokenizer::is_empty_text(const std::vector<TokenId>& ids) const { return ids == encode(""); }

bool has_tokenizer(const fs::path& dir) {
  std::error_code error;
  const auto present = [&](const char* name) { return fs::exists(fs::symlink_status(dir / name, error)); };
  return present("spiece.model") || present("tokenizer.json") || (present("vocab.json") && present("merges.txt"));
}

void check_token_id(std::int64_t id, TokenId vocab_size) {
  if (id < 0 || id >= vocab_size) {
    throw std::invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary 0.." +
                                std::to_string(vocab_size - 1) +
                                " (label padding -100 must be replaced by the pad id before decoding)");
  }
}

bool truncate_keeping_eos(std::vector<TokenId>& ids, std::size_t max_length) {
  if (max_length == 0) {
    throw std::invalid_argument("a maximum length of 0 leaves no room for </s>; use at least 1");
  }
  if (ids.size() <= max_length) return false;
  const TokenId last = ids.back();
  ids.resize(max_length);
  ids.back() = last;
  return true;
}

std::string clean_up_tokenization(std::string text) {
  // Same replacements in the same order as HF; each one runs over the result of the previous.
  static constexpr std::string_view replacements[][2] = {{" .", "."},     {" ?", "?"},     {" !", "!"},   {" ,", ","},
                                                         {" ' ", "'"},    {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"},
                                                         {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& pair : replacements) replace_all(text, pair[0], pair[1]);
  return text;
}

}  // namespace fitsum::tokenizer
