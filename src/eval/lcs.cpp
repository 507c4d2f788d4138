// Implements include/fitsum/eval/lcs.h. The read-out of rows lo..hi needs only the table row above them, so rows are
// split in halves: the row at the middle is computed forwards, the lower half is read out from it, and the upper
// half afterwards from the row above it. Every value the read-out compares is the table's own, so the positions are
// exactly those of the full table; the cost is O(rows x cols x log(rows / block)) time and one block of memory.
#include "fitsum/eval/lcs.h"

#include <algorithm>
#include <cstdint>

namespace fitsum::eval {

namespace {

// rouge_score's read-out over blocks of at most kBlockCells table cells (4M cells, 16 MiB).
class LcsReadOut {
 public:
  LcsReadOut(const TokenIds& reference, const TokenIds& candidate) : reference_(reference), candidate_(candidate) {}

  std::vector<std::size_t> positions() {
    positions_.clear();
    if (!reference_.empty() && !candidate_.empty()) {
      read_rows(1, reference_.size(), candidate_.size(), Row(candidate_.size() + 1, 0));
    }
    std::reverse(positions_.begin(), positions_.end());
    return positions_;
  }

 private:
  using Row = std::vector<std::uint32_t>;  // one table row, columns 0..j
  static constexpr std::size_t kBlockCells = std::size_t{1} << 22;

  // Turns `row` (table row `first`, columns 0..cols) into table row `last`.
  void advance(Row& row, std::size_t first, std::size_t last, std::size_t cols) const {
    Row next(cols + 1, 0);
    for (std::size_t i = first + 1; i <= last; ++i) {
      for (std::size_t j = 1; j <= cols; ++j) {
        next[j] = reference_[i - 1] == candidate_[j - 1] ? row[j - 1] + 1 : std::max(row[j], next[j - 1]);
      }
      std::swap(row, next);
    }
  }

  // Reads out table rows lo..hi, entering row hi at column j, given `above` = table row lo - 1 (columns 0..j at
  // least). Returns the column at which the read-out leaves for row lo - 1.
  std::size_t read_rows(std::size_t lo, std::size_t hi, std::size_t j, Row above) {
    above.resize(j + 1);
    if (j == 0) return 0;
    if (lo == hi || (hi - lo + 1) * (j + 1) <= kBlockCells) return read_block(lo, hi, j, above);
    const std::size_t mid = lo + (hi - lo) / 2;
    Row middle = above;
    advance(middle, lo - 1, mid, j);
    const std::size_t exit = read_rows(mid + 1, hi, j, std::move(middle));
    return read_rows(lo, mid, exit, std::move(above));
  }

  // The plain read-out over a table block holding rows lo - 1 .. hi.
  std::size_t read_block(std::size_t lo, std::size_t hi, std::size_t j, const Row& above) {
    const std::size_t cols = j;
    std::vector<std::uint32_t> table((hi - lo + 2) * (cols + 1), 0);
    const auto at = [&](std::size_t i, std::size_t c) { return (i - (lo - 1)) * (cols + 1) + c; };
    std::copy(above.begin(), above.begin() + static_cast<std::ptrdiff_t>(cols + 1), table.begin());
    for (std::size_t i = lo; i <= hi; ++i) {
      for (std::size_t c = 1; c <= cols; ++c) {
        table[at(i, c)] = reference_[i - 1] == candidate_[c - 1] ? table[at(i - 1, c - 1)] + 1
                                                                 : std::max(table[at(i - 1, c)], table[at(i, c - 1)]);
      }
    }
    std::size_t i = hi;
    while (i >= lo && j > 0) {
      if (reference_[i - 1] == candidate_[j - 1]) {
        positions_.push_back(i - 1);
        --i;
        --j;
      } else if (table[at(i, j - 1)] > table[at(i - 1, j)]) {
        --j;
      } else {
        --i;
      }
    }
    return j;
  }

  const TokenIds& reference_;
  const TokenIds& candidate_;
  std::vector<std::size_t> positions_;
};

}  // namespace

std::size_t lcs_length(const TokenIds& a, const TokenIds& b) {
  std::vector<std::uint32_t> previous(b.size() + 1, 0);
  std::vector<std::uint32_t> current(b.size() + 1, 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      current[j] = a[i - 1] == b[j - 1] ? previous[j - 1] + 1 : std::max(previous[j], current[j - 1]);
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::vector<std::size_t> lcs_reference_positions(const TokenIds& reference, const TokenIds& candidate) {
  return LcsReadOut(reference, candidate).positions();
}

}  // namespace fitsum::eval
