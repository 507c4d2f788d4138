// The key/value cache of incremental decoding (HF's past_key_values): what a decoder keeps between generation
// steps so that each step computes only the new position. Plain data plus the row bookkeeping of greedy and beam
// search; the model (model/seq2seq.h) fills and reads it.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace fitsum::model {

// Keys and values of one attention block kept between decoding steps.  (B, heads, S, head_dim) each.
struct AttentionCache {
  at::Tensor key;
  at::Tensor value;
  // Query rows per cached row: query rows g * group .. g * group + group - 1 attend over cached row g. Beam search's
  // beams of one source share its cross-attention keys/values this way instead of holding num_beams copies, and
  // their queries meet them in one product per source and head.
  std::int64_t group = 1;
  bool empty() const { return !key.defined(); }
};

// The key/value cache of a whole decoder: self-attention grows by one position per step and holds one row per
// decoder row; cross-attention keys/values are computed once from the encoder states and hold one row per source,
// each shared by `rows_per_source` consecutive decoder rows. decode() then takes encoder states and a mask with
// one row per source.
struct DecoderCache {
  std::vector<AttentionCache> self_attention;
  std::vector<AttentionCache> cross_attention;
  std::int64_t length = 0;           // decoder positions already processed
  std::int64_t rows_per_source = 1;  // decoder rows sharing one source's cross-attention keys/values

  // Keeps decoder rows `rows` (R') in that order (beam search reorders or drops hypotheses, greedy search drops
  // finished rows) and sources `sources` (B') of the cross-attention keys/values, R' = B' * rows_per_source. With
  // `sources` undefined the sources stay as they are when rows_per_source > 1 (beams reordered within their
  // sources) and follow `rows` when it is 1 (a row is its own source).
  void select(const at::Tensor& rows, const at::Tensor& sources = {});
  // Every decoder row becomes `group` consecutive rows (a source's first row becoming its beams); the
  // cross-attention keys/values are not copied.
  void expand(std::int64_t group);
};

// The sources a select of decoder rows `rows` (R') keeps, by DecoderCache::select's rule: `sources` (B') when
// given, else `rows` when each source has one row, else undefined (the sources stay as they are). Throws unless
// R' = B' * rows_per_source.
at::Tensor kept_sources(const at::Tensor& rows, const at::Tensor& sources, std::int64_t rows_per_source);

}  // namespace fitsum::model
