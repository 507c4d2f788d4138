// ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum of one prediction against one reference, identical to Google's
// `rouge_score` (rouge_scorer.py, the package Hugging Face `evaluate` uses):
//   rougeN     multiset n-gram overlap; P = overlap / max(#prediction n-grams, 1), R likewise with the reference.
//   rougeL     longest common subsequence of the whole token sequences; 0 when either side has no tokens.
//   rougeLsum  summary-level LCS: the text is split into sentences on "\n" only (empty lines dropped); for each
//              reference sentence the union of its LCS with every prediction sentence counts as hits, each token
//              clipped by how often it is still unused on both sides (as ROUGE-1.5.5 does).
//   F = 2PR / (P + R), or 0 when P + R = 0.
// With split_sentences, newlines are first inserted between sentences (sentence_splitter.h) for rougeLsum only,
// as Hugging Face's run_summarization.py does; rouge1/2/L never depend on sentences.
//
// Not here: reading files (rouge_io.h) and averaging over a corpus (rouge_aggregate.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fitsum::eval {

struct RougeOptions {
  bool use_stemmer = false;      // Porter-stem tokens longer than 3 characters (rouge_score's use_stemmer)
  bool split_sentences = false;  // insert "\n" between sentences before rougeLsum (HF's --rouge_split_sentences)
};

enum class RougeType { kRouge1 = 0, kRouge2 = 1, kRougeL = 2, kRougeLsum = 3 };
inline constexpr std::size_t kNumRougeTypes = 4;
inline constexpr std::array<RougeType, kNumRougeTypes> kRougeTypes = {RougeType::kRouge1, RougeType::kRouge2,
                                                                      RougeType::kRougeL, RougeType::kRougeLsum};

// "rouge1", "rouge2", "rougeL", "rougeLsum": the keys rouge_score and HF evaluate use.
std::string_view rouge_type_name(RougeType type);

// Fractions in [0, 1].
struct RougeScore {
  double precision = 0.0;  // against the prediction
  double recall = 0.0;     // against the reference
  double fmeasure = 0.0;
};

struct RougeScores {
  std::array<RougeScore, kNumRougeTypes> by_type{};

  RougeScore& operator[](RougeType type) { return by_type[static_cast<std::size_t>(type)]; }
  const RougeScore& operator[](RougeType type) const { return by_type[static_cast<std::size_t>(type)]; }
};

// rouge_score's F: 2PR / (P + R), computed in the same order so that the last bit agrees.
double rouge_fmeasure(double precision, double recall);

// The most LCS table cells (reference tokens x prediction tokens) one pair may need: 2^30, e.g. 32,768 tokens on
// each side, computed in a few seconds. The LCS read-out of rougeLsum holds only a block of the table (linear space
// in the prediction's length), so memory stays small up to the bound; rouge_score would hold the whole table.
inline constexpr std::uint64_t kMaxRougeLcsCells = std::uint64_t{1} << 30;

// All four ROUGE types of `prediction` against `reference` (rouge_score's score(target=reference, prediction)).
// Throws std::invalid_argument when the pair exceeds kMaxRougeLcsCells.
RougeScores score_rouge(std::string_view reference, std::string_view prediction, const RougeOptions& options);

}  // namespace fitsum::eval
