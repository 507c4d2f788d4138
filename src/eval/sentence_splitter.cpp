// Implements include/fitsum/eval/sentence_splitter.h: one pass over the words of the text, deciding for each gap
// between two words whether it is a sentence break.
#include "fitsum/eval/sentence_splitter.h"
#include "fitsum/util/strings.h"

#include <array>
#include <vector>

namespace fitsum::eval {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }
using util::ends_with;

// Closing and opening punctuation around a word, ASCII and the curly quotes (UTF-8).
constexpr std::array<std::string_view, 7> kClosers = {"\"", "'", ")", "]", "}", "\u2019", "\u201D"};
constexpr std::array<std::string_view, 6> kOpeners = {"\"", "'", "(", "[", "\u2018", "\u201C"};

std::string_view strip_closers(std::string_view word) {
  for (bool stripped = true; stripped && !word.empty();) {
    stripped = false;
    for (const std::string_view closer : kClosers) {
      if (ends_with(word, closer)) {
        word.remove_suffix(closer.size());
        stripped = true;
        break;
      }
    }
  }
  return word;
}

std::string_view strip_openers(std::string_view word) {
  for (bool stripped = true; stripped && !word.empty();) {
    stripped = false;
    for (const std::string_view opener : kOpeners) {
      if (starts_with(word, opener)) {
        word.remove_prefix(opener.size());
        stripped = true;
        break;
      }
    }
  }
  return word;
}

std::string ascii_lower(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) {
    if (is_upper(c)) {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return lower;
}

// Abbreviations that practically never end a sentence in a summary.
bool is_non_final_abbreviation(std::string_view lower) {
  static constexpr std::array<std::string_view, 40> kAbbreviations = {
      "mr",  "mrs", "ms",  "dr",  "prof", "rev", "gen",    "col",  "capt", "lt",  "sgt", "hon", "st", "mt",
      "jr",  "sr",  "vs",  "e.g", "i.e",  "cf",  "approx", "dept", "est",  "fig", "inc", "ltd", "co", "corp",
      "jan", "feb", "mar", "apr", "jun",  "jul", "aug",    "sep",  "sept", "oct", "nov", "dec"};
  for (const std::string_view abbreviation : kAbbreviations) {
    if (lower == abbreviation) {
      return true;
    }
  }
  return false;
}

bool all_digits(std::string_view text) {
  if (text.empty()) {
    return false;
  }
  for (const char c : text) {
    if (!is_digit(c)) {
      return false;
    }
  }
  return true;
}

bool ends_sentence(std::string_view word, std::string_view next_word) {
  const std::string_view core = strip_closers(word);
  if (core.empty()) {
    return false;
  }
  if (core.back() == '!' || core.back() == '?') {
    return true;
  }
  if (core.back() != '.') {
    return false;
  }
  const std::string_view next = strip_openers(next_word);
  const bool next_starts_upper = !next.empty() && is_upper(next.front());
  const bool next_starts_lower = !next.empty() && is_lower(next.front());

  if (ends_with(core, "..")) {
    return next_starts_upper;  // an ellipsis ends a sentence only before a capital
  }
  const std::string_view body = strip_openers(core.substr(0, core.size() - 1));
  const std::string lower = ascii_lower(body);
  if (is_non_final_abbreviation(lower)) {
    return false;
  }
  if (lower.size() == 1 && is_lower(lower[0])) {
    return false;  // an initial
  }
  if (lower == "etc" || lower.find('.') != std::string::npos) {
    return next_starts_upper;
  }
  if (all_digits(body)) {
    return !next_starts_lower;
  }
  return true;
}

}  // namespace

std::string insert_sentence_newlines(std::string_view text) {
  // Words as [begin, end) byte ranges.
  std::vector<std::pair<std::size_t, std::size_t>> words;
  for (std::size_t i = 0; i < text.size();) {
    if (is_space(text[i])) {
      ++i;
      continue;
    }
    const std::size_t begin = i;
    while (i < text.size() && !is_space(text[i])) {
      ++i;
    }
    words.emplace_back(begin, i);
  }

  std::string result;
  result.reserve(text.size());
  std::size_t copied = 0;  // text[0, copied) is in result
  for (std::size_t w = 0; w + 1 < words.size(); ++w) {
    const std::size_t gap_begin = words[w].second;
    const std::size_t gap_end = words[w + 1].first;
    const std::string_view gap = text.substr(gap_begin, gap_end - gap_begin);
    if (gap.find('\n') != std::string_view::npos) {
      continue;
    }
    const std::string_view word = text.substr(words[w].first, words[w].second - words[w].first);
    const std::string_view next_word = text.substr(words[w + 1].first, words[w + 1].second - words[w + 1].first);
    if (ends_sentence(word, next_word)) {
      result.append(text.substr(copied, gap_begin - copied));
      result.push_back('\n');
      copied = gap_end;
    }
  }
  result.append(text.substr(copied));
  return result;
}

}  // namespace fitsum::eval
