// Implements include/fitsum/eval/rouge.h. Tokens of one (reference, prediction) pair are mapped to small integer
// ids first, so n-gram counting and the LCS tables compare integers. The LCS read-out follows rouge_score's
// backtracking order exactly: where several longest subsequences exist, rougeLsum's union (and therefore its
// score) depends on which one is read out.
#include "fitsum/eval/rouge.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "fitsum/eval/lcs.h"
#include "fitsum/eval/rouge_tokenizer.h"
#include "fitsum/eval/sentence_splitter.h"
#include "fitsum/util/checked_math.h"

namespace fitsum::eval {

namespace {

// Gives each distinct token of one pair a dense id (0, 1, 2, ...).
class TokenVocabulary {
 public:
  TokenIds ids_of(const std::vector<std::string>& tokens) {
    TokenIds ids;
    ids.reserve(tokens.size());
    for (const std::string& token : tokens) {
      const auto [it, inserted] = ids_.emplace(token, static_cast<int>(ids_.size()));
      ids.push_back(it->second);
    }
    return ids;
  }
  std::size_t size() const { return ids_.size(); }

 private:
  std::unordered_map<std::string, int> ids_;
};

RougeScore score_from_counts(std::size_t matches, std::size_t prediction_total, std::size_t reference_total) {
  RougeScore score;
  score.precision = static_cast<double>(matches) / static_cast<double>(prediction_total);
  score.recall = static_cast<double>(matches) / static_cast<double>(reference_total);
  score.fmeasure = rouge_fmeasure(score.precision, score.recall);
  return score;
}

// rougeN: multiset overlap of n-grams. An empty side gives 0 (the max(count, 1) denominators).
RougeScore score_ngrams(const TokenIds& reference, const TokenIds& prediction, std::size_t n) {
  const auto count_ngrams = [n](const TokenIds& tokens) {
    std::map<TokenIds, int> counts;
    for (std::size_t i = 0; i + n <= tokens.size(); ++i) {
      ++counts[TokenIds(tokens.begin() + i, tokens.begin() + i + n)];
    }
    return counts;
  };
  const std::map<TokenIds, int> reference_counts = count_ngrams(reference);
  const std::map<TokenIds, int> prediction_counts = count_ngrams(prediction);
  std::size_t overlap = 0;
  std::size_t reference_total = 0;
  std::size_t prediction_total = 0;
  for (const auto& [ngram, count] : reference_counts) {
    reference_total += count;
    const auto it = prediction_counts.find(ngram);
    if (it != prediction_counts.end()) {
      overlap += std::min(count, it->second);
    }
  }
  for (const auto& entry : prediction_counts) {
    prediction_total += entry.second;
  }
  return score_from_counts(overlap, std::max<std::size_t>(prediction_total, 1),
                           std::max<std::size_t>(reference_total, 1));
}

// rougeL over the whole token sequences.
RougeScore score_lcs(const TokenIds& reference, const TokenIds& prediction) {
  if (reference.empty() || prediction.empty()) {
    return {};
  }
  return score_from_counts(lcs_length(reference, prediction), prediction.size(), reference.size());
}

// rouge_score's cost is one table cell per pair of tokens (for rougeL, and summed over sentence pairs for
// rougeLsum, which comes to the same); past the bound, a pair is refused instead of computed for minutes.
void check_lcs_size(std::size_t reference_tokens, std::size_t prediction_tokens) {
  std::uint64_t cells = 0;
  if (util::multiply_overflows(static_cast<std::uint64_t>(reference_tokens),
                               static_cast<std::uint64_t>(prediction_tokens), cells) ||
      cells > kMaxRougeLcsCells) {
    throw std::invalid_argument("ROUGE-L of a reference of " + std::to_string(reference_tokens) +
                                " tokens and a prediction of " + std::to_string(prediction_tokens) +
                                " tokens needs more than " + std::to_string(kMaxRougeLcsCells) +
                                " table cells (fitsum's bound on one pair); shorten or split the texts");
  }
}

// rougeLsum: union LCS of each reference sentence against all prediction sentences, hits clipped by the token
// counts still unused on both sides (ROUGE-1.5.5's guard against counting a token twice).
RougeScore score_summary_lcs(const std::vector<TokenIds>& reference_sentences,
                             const std::vector<TokenIds>& prediction_sentences, std::size_t vocabulary_size) {
  if (reference_sentences.empty() || prediction_sentences.empty()) {
    return {};
  }
  std::vector<int> reference_unused(vocabulary_size, 0);
  std::vector<int> prediction_unused(vocabulary_size, 0);
  std::size_t reference_total = 0;
  std::size_t prediction_total = 0;
  for (const TokenIds& sentence : reference_sentences) {
    reference_total += sentence.size();
    for (const int token : sentence) {
      ++reference_unused[token];
    }
  }
  for (const TokenIds& sentence : prediction_sentences) {
    prediction_total += sentence.size();
    for (const int token : sentence) {
      ++prediction_unused[token];
    }
  }
  if (reference_total == 0 || prediction_total == 0) {
    return {};
  }

  std::size_t hits = 0;
  for (const TokenIds& reference : reference_sentences) {
    std::vector<std::size_t> union_positions;
    for (const TokenIds& prediction : prediction_sentences) {
      const std::vector<std::size_t> positions = lcs_reference_positions(reference, prediction);
      union_positions.insert(union_positions.end(), positions.begin(), positions.end());
    }
    std::sort(union_positions.begin(), union_positions.end());
    union_positions.erase(std::unique(union_positions.begin(), union_positions.end()), union_positions.end());
    for (const std::size_t position : union_positions) {
      const int token = reference[position];
      if (prediction_unused[token] > 0 && reference_unused[token] > 0) {
        ++hits;
        --prediction_unused[token];
        --reference_unused[token];
      }
    }
  }
  return score_from_counts(hits, prediction_total, reference_total);
}

// rouge_score's sentences for rougeLsum: split on "\n" only, drop empty strings. A line holding only "\r" or
// spaces stays a sentence (with no tokens).
std::vector<std::string_view> newline_sentences(std::string_view text) {
  std::vector<std::string_view> sentences;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      end = text.size();
    }
    if (end > start) {
      sentences.push_back(text.substr(start, end - start));
    }
    start = end + 1;
  }
  return sentences;
}

std::vector<TokenIds> tokenize_sentences(std::string_view text, bool use_stemmer, TokenVocabulary& vocabulary) {
  std::vector<TokenIds> sentences;
  for (const std::string_view sentence : newline_sentences(text)) {
    sentences.push_back(vocabulary.ids_of(rouge_tokenize(sentence, use_stemmer)));
  }
  return sentences;
}

}  // namespace

std::string_view rouge_type_name(RougeType type) {
  switch (type) {
    case RougeType::kRouge1:
      return "rouge1";
    case RougeType::kRouge2:
      return "rouge2";
    case RougeType::kRougeL:
      return "rougeL";
    case RougeType::kRougeLsum:
      return "rougeLsum";
  }
  throw std::invalid_argument("unknown ROUGE type " + std::to_string(static_cast<int>(type)));
}

double rouge_fmeasure(double precision, double recall) {
  if (precision + recall > 0) {
    return 2 * precision * recall / (precision + recall);
  }
  return 0.0;
}

RougeScores score_rouge(std::string_view reference, std::string_view prediction, const RougeOptions& options) {
  TokenVocabulary vocabulary;
  const TokenIds reference_tokens = vocabulary.ids_of(rouge_tokenize(reference, options.use_stemmer));
  const TokenIds prediction_tokens = vocabulary.ids_of(rouge_tokenize(prediction, options.use_stemmer));
  check_lcs_size(reference_tokens.size(), prediction_tokens.size());

  std::vector<TokenIds> reference_sentences;
  std::vector<TokenIds> prediction_sentences;
  if (options.split_sentences) {
    reference_sentences = tokenize_sentences(insert_sentence_newlines(reference), options.use_stemmer, vocabulary);
    prediction_sentences = tokenize_sentences(insert_sentence_newlines(prediction), options.use_stemmer, vocabulary);
  } else {
    reference_sentences = tokenize_sentences(reference, options.use_stemmer, vocabulary);
    prediction_sentences = tokenize_sentences(prediction, options.use_stemmer, vocabulary);
  }

  RougeScores scores;
  scores[RougeType::kRouge1] = score_ngrams(reference_tokens, prediction_tokens, 1);
  scores[RougeType::kRouge2] = score_ngrams(reference_tokens, prediction_tokens, 2);
  scores[RougeType::kRougeL] = score_lcs(reference_tokens, prediction_tokens);
  scores[RougeType::kRougeLsum] = score_summary_lcs(reference_sentences, prediction_sentences, vocabulary.size());
  return scores;
}

}  // namespace fitsum::eval
