// Implements include/fitsum/tokenizer/bart_tokenizer.h. The reference is transformers' BartTokenizer (4.35,
// tokenization_bart.py) on PreTrainedTokenizer's tokenize / _add_tokens / _decode (tokenization_utils.py).
#include "fitsum/tokenizer/bart_tokenizer.h"

#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "fitsum/tokenizer/python_text.h"
#include "fitsum/util/files.h"

namespace fitsum::tokenizer {

namespace {

BartTokenizerOptions read_options(const fs::path& dir) {
  BartTokenizerOptions options;
  if (util::folder_has_file(dir, "tokenizer_config.json")) {
    const auto file = dir / "tokenizer_config.json";
    const auto config = util::read_json_file(file);
    if (config.is_object() && config.contains("add_prefix_space")) {
      if (!config["add_prefix_space"].is_boolean()) {
        throw std::runtime_error("'" + file.string() + "': add_prefix_space is " + config["add_prefix_space"].dump() +
                                 ", not true or false");
      }
      options.add_prefix_space = config["add_prefix_space"].get<bool>();
    }
  }
  return options;
}

// tokenizer.json's added_tokens: objects with a string content and an id in 0 .. 2^31 - 2.
std::vector<AddedToken> read_added_tokens(const nlohmann::json& json, const fs::path& file) {
  std::vector<AddedToken> added;
  if (!json.contains("added_tokens")) return added;
  const auto& list = json["added_tokens"];
  if (!list.is_array()) throw std::runtime_error("'" + file.string() + "': added_tokens is not a list");
  const auto flag = [&](const nlohmann::json& token, const char* name) {
    const auto it = token.find(name);
    return it != token.end() && it->is_boolean() && it->get<bool>();
  };
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto& token = list[i];
    const bool ok = token.is_object() && token.contains("content") && token["content"].is_string() &&
                    token.contains("id") && token["id"].is_number_integer() && token["id"].get<std::int64_t>() >= 0 &&
                    token["id"].get<std::int64_t>() < std::numeric_limits<TokenId>::max();
    if (!ok) {
      throw std::runtime_error("'" + file.string() + "': added_tokens[" + std::to_string(i) +
                               "] is not {\"content\": string, \"id\": integer in 0 .. 2147483646, ...}");
    }
    added.push_back({token["content"].get<std::string>(), token["id"].get<TokenId>(), flag(token, "lstrip"),
                     flag(token, "rstrip"), flag(token, "single_word")});
  }
  return added;
}

}  // namespace

BartTokenizer BartTokenizer::from_folder(const fs::path& dir) {
  if (util::folder_has_file(dir, "vocab.json") && util::folder_has_file(dir, "merges.txt")) {
    return BartTokenizer(ByteLevelBpe::from_files(dir / "vocab.json", dir / "merges.txt"), read_options(dir));
  }
  if (util::folder_has_file(dir, "tokenizer.json")) {
    const fs::path file = dir / "tokenizer.json";
    const auto json = util::read_json_file(file);
    if (!json.is_object() || !json.contains("model")) {
      throw std::runtime_error("'" + file.string() + "' has no \"model\": not a tokenizers file");
    }
    BartTokenizer tokenizer(ByteLevelBpe::from_tokenizer_json(json["model"], file), read_options(dir));
    tokenizer.use_added_tokens(read_added_tokens(json, file));
    return tokenizer;
  }
  throw std::runtime_error("no vocab.json + merges.txt or tokenizer.json in '" + dir.string() +
                           "': fitsum needs the byte-level BPE files of a BART checkpoint; copy them there or pass "
                           "--tokenizer_name with a folder that has them");
}

BartTokenizer::BartTokenizer(ByteLevelBpe bpe, BartTokenizerOptions options) : bpe_(std::move(bpe)), options_(options) {
  vocab_size_ = bpe_.size();
  // all_special_tokens_extended's order, duplicates (sep = </s>, cls = <s>) once.
  add_special("<s>", bos_id_, false);
  add_special("</s>", eos_id_, false);
  add_special("<unk>", unk_id_, false);
  add_special("<pad>", pad_id_, false);
  add_special("<mask>", mask_id_, true);  // "behaves like a normal word, i.e. includes the space before it"
}

void BartTokenizer::add_special(const std::string& content, TokenId& id, bool lstrip) {
  const auto in_vocab = bpe_.token_to_id(content);
  id = in_vocab ? *in_vocab : vocab_size_++;
  added_.add({content, id, lstrip, false, false});
}

void BartTokenizer::use_added_tokens(const std::vector<AddedToken>& tokens) {
  for (const AddedToken& token : tokens) {
    added_.add(token);
    vocab_size_ = std::max(vocab_size_, token.id + 1);
    if (token.content == "<s>") bos_id_ = token.id;
    if (token.content == "</s>") eos_id_ = token.id;
    if (token.content == "<unk>") unk_id_ = token.id;
    if (token.content == "<pad>") pad_id_ = token.id;
    if (token.content == "<mask>") mask_id_ = token.id;
  }
}

bool BartTokenizer::is_special(TokenId id) const {
  return id == bos_id_ || id == eos_id_ || id == unk_id_ || id == pad_id_ || id == mask_id_;
}

std::vector<TokenId> BartTokenizer::encode(std::string_view text, std::optional<std::size_t> max_length,
                                           bool* truncated) const {
  if (max_length && *max_length < 2) {
    throw std::invalid_argument("a maximum length of " + std::to_string(*max_length) +
                                " is below BART's 2 special tokens (<s> </s>), which Hugging Face's tokenizers then "
                                "leave untruncated; use at least 2 (2 keeps <s> </s> alone)");
  }
  // Checked over the whole text here, not only where words are merged: with max_length the words past the kept ids
  // are never looked at, and a text is refused or not whatever the length asked for.
  if (const std::size_t bad = find_invalid_utf8(text); bad != std::string_view::npos) {
    throw std::invalid_argument("text is not valid UTF-8 (byte " + std::to_string(bad) +
                                "): GPT-2's byte-level tokenizer reads Unicode text; fix the file's encoding");
  }
  std::string prepared(text);
  std::size_t first_length = 0;
  if (options_.add_prefix_space && !prepared.empty() && !is_python_space(code_point_at(prepared, 0, first_length))) {
    prepared.insert(0, " ");
  }
  std::vector<TokenId> ids{bos_id_};
  std::vector<std::string> tokens;
  // With max_length, the words after the first max_length ids are not merged: they cannot change those ids.
  const std::size_t enough = max_length ? *max_length : std::numeric_limits<std::size_t>::max();
  for (const auto& chunk : added_.split(prepared)) {
    if (ids.size() >= enough) break;
    if (chunk.token != nullptr) {
      ids.push_back(chunk.token->id);
      continue;
    }
    tokens.clear();
    bpe_.tokenize(chunk.text, tokens, enough - ids.size());
    for (const std::string& token : tokens) {
      const AddedToken* added = added_.find(token);
      ids.push_back(added ? added->id : bpe_.token_to_id(token).value_or(unk_id_));
    }
  }
  const bool cut = max_length && ids.size() + 1 > *max_length;
  if (truncated) *truncated = cut;
  if (cut) ids.resize(*max_length - 1);  // text ids cut from the end
  ids.push_back(eos_id_);
  return ids;
}

std::string BartTokenizer::id_to_token(TokenId id) const {
  check_token_id(id, vocab_size_);
  if (const AddedToken* added = added_.find(id)) return added->content;
  if (const std::string* token = bpe_.id_to_token(id)) return *token;
  throw std::invalid_argument("token id " + std::to_string(id) + " is not in the vocabulary (vocab.json has no entry)");
}

std::string BartTokenizer::decode(const std::vector<TokenId>& ids, const DecodeOptions& options) const {
  // HF's _decode: every token that survives skip_special_tokens goes through convert_tokens_to_string together
  // (BART's special tokens are not "legacy added tokens", and their ASCII characters are in the byte map).
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const TokenId id : ids) {
    check_token_id(id, vocab_size_);
    if (options.skip_special_tokens && is_special(id)) continue;
    tokens.push_back(id_to_token(id));
  }
  std::string text = ByteLevelBpe::tokens_to_text(tokens);
  return options.clean_up_tokenization_spaces ? clean_up_tokenization(std::move(text)) : text;
}

}  // namespace fitsum::tokenizer
