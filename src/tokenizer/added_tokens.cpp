// Implements include/fitsum/tokenizer/added_tokens.h. The reference is PreTrainedTokenizer.tokenize in transformers
// 4.35 (tokenization_utils.py): Trie.split, then one pass that applies rstrip / lstrip / single_word to the
// neighbours of every token, then the chunks that still spell a token become that token.
#include "fitsum/tokenizer/added_tokens.h"

#include "fitsum/tokenizer/python_text.h"

namespace fitsum::tokenizer {

void AddedTokens::add(AddedToken token) {
  if (const auto it = by_content_.find(token.content); it != by_content_.end()) {
    by_id_.erase(tokens_[it->second].id);
    tokens_[it->second] = token;
    by_id_[token.id] = it->second;
    return;
  }
  by_content_[token.content] = tokens_.size();
  by_id_[token.id] = tokens_.size();
  tokens_.push_back(std::move(token));
}

const AddedToken* AddedTokens::find(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedTokens::find(std::int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::size_t AddedTokens::find_next(std::string_view text, std::size_t from, const AddedToken*& token) const {
  std::size_t best = std::string_view::npos;
  token = nullptr;
  for (const AddedToken& candidate : tokens_) {
    const std::size_t at = text.find(candidate.content, from);
    if (at == std::string_view::npos || candidate.content.empty()) continue;
    if (at < best || (at == best && candidate.content.size() > token->content.size())) {
      best = at;
      token = &candidate;
    }
  }
  return best;
}

std::vector<AddedTokens::Chunk> AddedTokens::split(std::string_view text) const {
  // 1. Trie.split: plain text and token strings, alternating as they occur.
  std::vector<std::string> parts;
  std::size_t start = 0;
  const AddedToken* token = nullptr;
  for (std::size_t at = find_next(text, 0, token); at != std::string_view::npos; at = find_next(text, start, token)) {
    if (at > start) parts.emplace_back(text.substr(start, at - start));
    parts.push_back(token->content);
    start = at + token->content.size();
  }
  if (start < text.size() || parts.empty()) parts.emplace_back(text.substr(start));

  // 2. The neighbours of each token, exactly as HF's loop edits them (it reads `left` / `right` before editing,
  // and a later step sees the edits of an earlier one).
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const AddedToken* current = find(parts[i]);
    if (current == nullptr) continue;
    const bool has_left = i > 0 && !parts[i - 1].empty();
    const bool has_right = i + 1 < parts.size() && !parts[i + 1].empty();
    const std::string left = has_left ? parts[i - 1] : std::string();
    const std::string right = has_right ? parts[i + 1] : std::string();
    if (current->rstrip && has_right) parts[i + 1] = python_lstrip(right);
    if (current->lstrip && has_left) parts[i - 1] = python_rstrip(left);
    if (current->single_word && has_left && left.back() != ' ') {
      parts[i - 1] += parts[i];
      parts[i].clear();
    } else if (current->single_word && has_right && right.front() != ' ') {
      parts[i + 1] = parts[i] + parts[i + 1];
      parts[i].clear();
    }
  }

  // 3. Chunks that spell a token are that token; empty ones are dropped.
  std::vector<Chunk> chunks;
  for (std::string& part : parts) {
    if (part.empty()) continue;
    const AddedToken* as_token = find(part);
    chunks.push_back({std::move(part), as_token});
  }
  return chunks;
}

}  // namespace fitsum::tokenizer
