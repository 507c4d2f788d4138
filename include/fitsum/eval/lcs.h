// Longest common subsequences of token-id sequences, as Google's rouge_score computes them for ROUGE-L and
// ROUGE-Lsum, in space linear in the candidate's length. rouge_score fills the whole (rows + 1) x (cols + 1) table;
// 60,000 tokens on each side would take 28 GB here, so only a bounded block of rows is ever held.
#pragma once

#include <cstddef>
#include <vector>

namespace fitsum::eval {

using TokenIds = std::vector<int>;

// The length of a longest common subsequence (two table rows).
std::size_t lcs_length(const TokenIds& a, const TokenIds& b);

// Positions in `reference` of the longest common subsequence with `candidate` that rouge_score's read-out
// (_backtrack_norec) yields, in increasing order: from the end, a match whenever the last tokens agree, otherwise
// a step along the candidate only when that keeps a strictly longer LCS, else along the reference. Where several
// longest subsequences exist, ROUGE-Lsum's union depends on which one this is, so it is exactly that one.
std::vector<std::size_t> lcs_reference_positions(const TokenIds& reference, const TokenIds& candidate);

}  // namespace fitsum::eval
