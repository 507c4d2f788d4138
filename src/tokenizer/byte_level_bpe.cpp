// Implements include/fitsum/tokenizer/byte_level_bpe.h. The reference is transformers' GPT2Tokenizer (4.35,
// tokenization_gpt2.py, which BartTokenizer copies): bytes_to_unicode, bpe() and _tokenize().
#include "fitsum/tokenizer/byte_level_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <fstream>
#include <limits>
#include <queue>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "fitsum/tokenizer/python_text.h"

namespace fitsum::tokenizer {

namespace {

// GPT-2's pattern with \s spelled as Unicode's White_Space property (the Python `regex` module's \s; PCRE2's own
// \s would add U+180E). (?![^\p{White_Space}]) is (?!\S).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
                                     R"(|\p{White_Space}+(?![^\p{White_Space}])|\p{White_Space}+)";

// bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 to U+0100 onwards, in byte order.
struct ByteMap {
  std::array<std::string, 256> byte_to_text;
  std::unordered_map<char32_t, unsigned char> code_point_to_byte;
  ByteMap() {
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      append_utf8(byte_to_text[b], c);
      code_point_to_byte[c] = static_cast<unsigned char>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

std::string read_file_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open '" + file.string() + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Python's str.split() with no argument, for a merges line.
std::vector<std::string> split_on_space(std::string_view line) {
  std::vector<std::string> parts;
  std::size_t pos = 0;
  std::size_t length = 0;
  std::string current;
  for (; pos < line.size(); pos += length) {
    const char32_t c = code_point_at(line, pos, length);
    if (is_python_space(c)) {
      if (!current.empty()) parts.push_back(std::move(current));
      current.clear();
    } else {
      current.append(line.substr(pos, length));
    }
  }
  if (!current.empty()) parts.push_back(std::move(current));
  return parts;
}

std::string pair_key(const std::string& first, const std::string& second) { return first + ' ' + second; }

}  // namespace

GptPretokenizer::GptPretokenizer() {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw std::runtime_error(std::string("PCRE2 cannot compile GPT-2's pre-tokenizer pattern: ") +
                             reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: plain matching when the JIT is unavailable
  code_ = std::shared_ptr<void>(code, [](void* c) { pcre2_code_free(static_cast<pcre2_code*>(c)); });
}

std::vector<std::string_view> GptPretokenizer::split(std::string_view text) const {
  if (const std::size_t bad = find_invalid_utf8(text); bad != std::string_view::npos) {
    throw std::invalid_argument("text is not valid UTF-8 (byte " + std::to_string(bad) +
                                "): GPT-2's byte-level tokenizer reads Unicode text; fix the file's encoding");
  }
  auto* code = static_cast<pcre2_code*>(code_.get());
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  std::vector<std::string_view> words;
  PCRE2_SIZE start = 0;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (start < text.size()) {
    const int found = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (found == PCRE2_ERROR_NOMATCH) break;  // cannot happen: every character matches one alternative
    if (found < 0) throw std::runtime_error("PCRE2 match failed with code " + std::to_string(found));
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match.get());
    if (range[1] == range[0]) break;  // no alternative matches empty text
    words.push_back(text.substr(range[0], range[1] - range[0]));
    start = range[1];
  }
  return words;
}

ByteLevelBpe::ByteLevelBpe(std::unordered_map<std::string, std::int32_t> vocab, const std::vector<Merge>& merges)
    : vocab_(std::move(vocab)) {
  for (const auto& [token, id] : vocab_) by_id_[id] = &token;
  // dict(zip(merges, range(n))): a repeated merge keeps its last rank.
  for (std::size_t rank = 0; rank < merges.size(); ++rank)
    ranks_[pair_key(merges[rank].first, merges[rank].second)] = rank;
}

namespace {

// A JSON object of token -> id, every id an integer in [0, 2^31 - 1); `what` names it in errors.
std::unordered_map<std::string, std::int32_t> read_vocab(const nlohmann::json& json, const std::string& what) {
  if (!json.is_object()) throw std::runtime_error(what + " is not a JSON object of token -> id");
  std::unordered_map<std::string, std::int32_t> vocab;
  for (const auto& [token, id] : json.items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
        id.get<std::int64_t>() >= std::numeric_limits<std::int32_t>::max()) {
      throw std::runtime_error(what + ": token '" + token + "' has id " + id.dump() +
                               ", not an integer in 0 .. 2147483646");
    }
    vocab[token] = id.get<std::int32_t>();
  }
  return vocab;
}

}  // namespace

ByteLevelBpe ByteLevelBpe::from_files(const fs::path& vocab_json, const fs::path& merges_txt) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(read_file_text(vocab_json));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("'" + vocab_json.string() + "' is not JSON: " + e.what());
  }
  auto vocab = read_vocab(json, "'" + vocab_json.string() + "'");
  const std::string text = read_file_text(merges_txt);
  std::vector<std::string_view> lines;
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find('\n', start);
    lines.push_back(std::string_view(text).substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  std::vector<Merge> merges;
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) {  // read().split("\n")[1:-1]
    auto parts = split_on_space(lines[i]);
    // A line that is not two symbols can never match a pair; it still takes a rank, as in HF.
    merges.emplace_back(parts.size() == 2 ? parts[0] : std::string(" "), parts.size() == 2 ? parts[1] : std::string());
  }
  return ByteLevelBpe(std::move(vocab), merges);
}

ByteLevelBpe ByteLevelBpe::from_tokenizer_json(const nlohmann::json& model, const fs::path& file) {
  const auto type = model.is_object() ? model.find("type") : model.end();
  if (!model.is_object() || type == model.end() || *type != "BPE" || !model.contains("vocab") ||
      !model.contains("merges") || !model["merges"].is_array()) {
    throw std::runtime_error("'" + file.string() + "': model is not a BPE model with vocab and merges");
  }
  auto vocab = read_vocab(model["vocab"], "'" + file.string() + "': model.vocab");
  std::vector<Merge> merges;
  for (const auto& merge : model.at("merges")) {
    if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());  // tokenizers >= 0.20: pairs
      continue;
    }
    if (!merge.is_string()) {
      throw std::runtime_error("'" + file.string() + "': model.merges holds " + merge.dump().substr(0, 80) +
                               ", neither \"first second\" nor a pair of strings");
    }
    const auto parts = split_on_space(merge.get<std::string>());
    if (parts.size() != 2) throw std::runtime_error("'" + file.string() + "': a merge is not two symbols");
    merges.emplace_back(parts[0], parts[1]);
  }
  return ByteLevelBpe(std::move(vocab), merges);
}

std::vector<std::string> ByteLevelBpe::merge_word(const std::string& word) const {
  // HF's bpe(): take the lowest-ranked adjacent pair, merge all its occurrences left to right, repeat. Rescanning the
  // word for every merge is quadratic (a 128 KB run of random letters took a minute, a megabyte would take hours), so
  // the candidate pairs wait in a heap ordered by (rank, position) instead. Each round takes every queued occurrence
  // of the lowest rank in word order and merges those whose symbols still form that pair, which is what HF's scan of
  // the word does; a pair made by a merge is queued and can only be taken in a later round, as in HF's next pass.
  std::vector<std::string> symbols;
  std::size_t length = 0;
  for (std::size_t pos = 0; pos < word.size(); pos += length) {
    code_point_at(word, pos, length);
    symbols.emplace_back(word.substr(pos, length));
  }
  constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  const std::size_t n = symbols.size();
  std::vector<std::size_t> next(n), previous(n);
  for (std::size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : kNone;
    previous[i] = i > 0 ? i - 1 : kNone;
  }
  std::vector<bool> alive(n, true);
  const auto rank_at = [&](std::size_t left) {
    if (left == kNone || next[left] == kNone) return kNone;
    const auto it = ranks_.find(pair_key(symbols[left], symbols[next[left]]));
    return it == ranks_.end() ? kNone : it->second;
  };
  using Candidate = std::pair<std::size_t, std::size_t>;  // (rank, index of the pair's left symbol)
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto enqueue = [&](std::size_t left) {
    if (const std::size_t rank = rank_at(left); rank != kNone) queue.emplace(rank, left);
  };
  for (std::size_t i = 0; i + 1 < n; ++i) enqueue(i);
  std::vector<std::size_t> round;
  while (!queue.empty()) {
    const std::size_t rank = queue.top().first;
    round.clear();
    for (; !queue.empty() && queue.top().first == rank; queue.pop()) {
      if (round.empty() || round.back() != queue.top().second) round.push_back(queue.top().second);
    }
    for (const std::size_t left : round) {
      if (!alive[left] || rank_at(left) != rank) continue;  // consumed, or no longer this pair
      const std::size_t right = next[left];
      symbols[left] += symbols[right];
      alive[right] = false;
      next[left] = next[right];
      if (next[right] != kNone) previous[next[right]] = left;
      enqueue(previous[left]);
      enqueue(left);
    }
  }
  std::vector<std::string> merged;
  for (std::size_t i = n > 0 ? 0 : kNone; i != kNone; i = next[i]) merged.push_back(std::move(symbols[i]));
  return merged;
}

void ByteLevelBpe::tokenize(std::string_view text, std::vector<std::string>& tokens, std::size_t max_tokens) const {
  const ByteMap& map = byte_map();
  for (const std::string_view word : pretokenizer_.split(text)) {
    if (tokens.size() >= max_tokens) return;
    std::string mapped;
    for (const char byte : word) mapped += map.byte_to_text[static_cast<unsigned char>(byte)];
    {
      std::lock_guard<std::mutex> lock(cache_->mutex);
      if (const auto it = cache_->words.find(mapped); it != cache_->words.end()) {
        tokens.insert(tokens.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    std::vector<std::string> merged = merge_word(mapped);
    tokens.insert(tokens.end(), merged.begin(), merged.end());
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->words.size() > 200000) cache_->words.clear();  // bounded: long corpora have long tails
    cache_->words.emplace(std::move(mapped), std::move(merged));
  }
}

std::optional<std::int32_t> ByteLevelBpe::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* ByteLevelBpe::id_to_token(std::int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

std::string ByteLevelBpe::tokens_to_text(const std::vector<std::string>& tokens) {
  const ByteMap& map = byte_map();
  std::string bytes;
  for (const std::string& token : tokens) {
    std::size_t length = 0;
    for (std::size_t pos = 0; pos < token.size(); pos += length) {
      const char32_t c = code_point_at(token, pos, length);
      const auto it = map.code_point_to_byte.find(c);
      if (it == map.code_point_to_byte.end()) {
        throw std::invalid_argument("token '" + token + "' has a character outside GPT-2's byte map");
      }
      bytes += static_cast<char>(it->second);
    }
  }
  return decode_utf8_replacing(bytes);
}

}  // namespace fitsum::tokenizer
