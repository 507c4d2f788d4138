// libFuzzer target: ROUGE on arbitrary text pairs (reference NUL prediction; the first byte picks the stemmer and
// sentence splitting), and the linear-space LCS read-out against rouge_score's full-table read-out.
#include <cmath>
#include <vector>

#include "fitsum/eval/lcs.h"
#include "fitsum/eval/rouge.h"
#include "fuzz_support.h"

namespace {

using fitsum::eval::TokenIds;

std::vector<std::size_t> full_table_positions(const TokenIds& ref, const TokenIds& can) {
  std::vector<std::vector<std::uint32_t>> t(ref.size() + 1, std::vector<std::uint32_t>(can.size() + 1, 0));
  for (std::size_t i = 1; i <= ref.size(); ++i) {
    for (std::size_t j = 1; j <= can.size(); ++j) {
      t[i][j] = ref[i - 1] == can[j - 1] ? t[i - 1][j - 1] + 1 : std::max(t[i - 1][j], t[i][j - 1]);
    }
  }
  std::vector<std::size_t> lcs;
  for (std::size_t i = ref.size(), j = can.size(); i > 0 && j > 0;) {
    if (ref[i - 1] == can[j - 1]) {
      lcs.insert(lcs.begin(), --i);
      --j;
    } else if (t[i][j - 1] > t[i - 1][j]) {
      --j;
    } else {
      --i;
    }
  }
  return lcs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto text = fitsum::fuzz::as_text(data + 1, size - 1);
  const auto split = text.find('\0');
  const auto reference = text.substr(0, split);
  const auto prediction = split == std::string_view::npos ? std::string_view() : text.substr(split + 1);
  fitsum::eval::RougeOptions options;
  options.use_stemmer = data[0] & 1;
  options.split_sentences = data[0] & 2;
  fitsum::fuzz::expect_only_documented_errors([&] {
    const auto scores = fitsum::eval::score_rouge(reference, prediction, options);
    for (const auto type : fitsum::eval::kRougeTypes) {
      const auto& s = scores[type];
      for (const double v : {s.precision, s.recall, s.fmeasure}) {
        if (!(v >= 0.0 && v <= 1.0)) __builtin_trap();
      }
    }
  });
  // Small token alphabets from the raw bytes, so that ties between longest subsequences are common.
  TokenIds a, b;
  for (const char c : reference.substr(0, 300)) a.push_back(static_cast<unsigned char>(c) % 4);
  for (const char c : prediction.substr(0, 300)) b.push_back(static_cast<unsigned char>(c) % 4);
  if (fitsum::eval::lcs_reference_positions(a, b) != full_table_positions(a, b)) __builtin_trap();
  return 0;
}
