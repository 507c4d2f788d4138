// The linear-space LCS read-out gives exactly the positions of rouge_score's full-table read-out (written out here
// as rouge_score writes it), also where the table is split into blocks and where many longest subsequences tie;
// ROUGE on pairs past the documented bound is refused with a sentence instead of std::bad_alloc or minutes of work.
#include <random>

#include <gtest/gtest.h>

#include "fitsum/eval/lcs.h"
#include "fitsum/eval/rouge.h"

namespace fitsum::eval {
namespace {

// rouge_score's _lcs_table and _backtrack_norec.
std::vector<std::size_t> full_table_positions(const TokenIds& ref, const TokenIds& can) {
  const std::size_t rows = ref.size(), cols = can.size();
  std::vector<std::vector<std::uint32_t>> t(rows + 1, std::vector<std::uint32_t>(cols + 1, 0));
  for (std::size_t i = 1; i <= rows; ++i) {
    for (std::size_t j = 1; j <= cols; ++j) {
      t[i][j] = ref[i - 1] == can[j - 1] ? t[i - 1][j - 1] + 1 : std::max(t[i - 1][j], t[i][j - 1]);
    }
  }
  std::vector<std::size_t> lcs;
  std::size_t i = rows, j = cols;
  while (i > 0 && j > 0) {
    if (ref[i - 1] == can[j - 1]) {
      lcs.insert(lcs.begin(), i - 1);
      --i;
      --j;
    } else if (t[i][j - 1] > t[i - 1][j]) {
      --j;
    } else {
      --i;
    }
  }
  return lcs;
}

TokenIds random_tokens(std::mt19937& rng, std::size_t n, int vocabulary) {
  std::uniform_int_distribution<int> pick(0, vocabulary - 1);
  TokenIds ids(n);
  for (auto& id : ids) id = pick(rng);
  return ids;
}

TEST(Lcs, ReadOutEqualsTheFullTableOnSmallAndTiedCases) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const auto a = random_tokens(rng, rng() % 40, 1 + static_cast<int>(rng() % 5));
    const auto b = random_tokens(rng, rng() % 40, 1 + static_cast<int>(rng() % 5));
    const auto want = full_table_positions(a, b);
    ASSERT_EQ(lcs_reference_positions(a, b), want) << "trial " << trial;
    ASSERT_EQ(lcs_length(a, b), want.size());
  }
}

TEST(Lcs, ReadOutEqualsTheFullTableWhereTheTableIsSplitIntoBlocks) {
  // 2600 x 2400 and 5000 x 900 cells exceed one 4M-cell block, so the middle-row recursion runs; three-word
  // vocabularies make many longest subsequences tie, which is where a read-out could pick another one.
  std::mt19937 rng(11);
  for (const auto& [rows, cols, vocabulary] :
       std::vector<std::tuple<std::size_t, std::size_t, int>>{{2600, 2400, 3}, {5000, 900, 2}, {1700, 3100, 50}}) {
    const auto a = random_tokens(rng, rows, vocabulary);
    const auto b = random_tokens(rng, cols, vocabulary);
    EXPECT_EQ(lcs_reference_positions(a, b), full_table_positions(a, b)) << rows << " x " << cols;
  }
}

TEST(Rouge, APairPastTheCellBoundIsRefusedWithASentence) {
  // 40,000 tokens on each side: 1.6e9 cells, past the 2^30 bound (the full table took 28 GB before).
  std::string text;
  for (int i = 0; i < 40000; ++i) text += "w" + std::to_string(i % 97) + " ";
  try {
    score_rouge(text, text, {});
    FAIL() << "expected the bound to refuse the pair";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("40000 tokens and a prediction of 40000 tokens"), std::string::npos)
        << e.what();
  }
}

TEST(Rouge, ALongPairBelowTheBoundIsScoredExactly) {
  // 6000 tokens in three lines against itself: every ROUGE is 1, and ROUGE-Lsum's read-out runs split.
  std::string text;
  for (int line = 0; line < 3; ++line) {
    for (int i = 0; i < 2000; ++i) text += "w" + std::to_string((i * 7 + line) % 13) + " ";
    text += "\n";
  }
  const auto scores = score_rouge(text, text, {});
  for (const RougeType type : kRougeTypes) EXPECT_DOUBLE_EQ(scores[type].fmeasure, 1.0) << rouge_type_name(type);
}

}  // namespace
}  // namespace fitsum::eval
