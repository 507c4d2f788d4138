// Implements include/fitsum/model/decoder_cache.h.
#include "fitsum/model/decoder_cache.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace fitsum::model {

at::Tensor kept_sources(const at::Tensor& rows, const at::Tensor& sources, std::int64_t rows_per_source) {
  const auto& kept = sources.defined() || rows_per_source > 1 ? sources : rows;
  TORCH_CHECK(!kept.defined() || rows.size(0) == kept.size(0) * rows_per_source, "selecting ", rows.size(0),
              " decoder rows for ", kept.size(0), " sources of ", rows_per_source, " rows each");
  return kept;
}

void DecoderCache::select(const at::Tensor& rows, const at::Tensor& sources) {
  const auto source_index = kept_sources(rows, sources, rows_per_source);
  const auto keep = [](AttentionCache& cache, const at::Tensor& index) {
    if (!cache.empty()) {
      cache.key = cache.key.index_select(0, index);
      cache.value = cache.value.index_select(0, index);
    }
  };
  for (auto& cache : self_attention) keep(cache, rows);
  if (source_index.defined()) {
    for (auto& cache : cross_attention) keep(cache, source_index);
  }
}

void DecoderCache::expand(std::int64_t group) {
  TORCH_CHECK(group >= 1, "DecoderCache::expand: group ", group);
  for (auto& cache : self_attention) {
    if (!cache.empty()) {
      cache.key = cache.key.repeat_interleave(group, 0);
      cache.value = cache.value.repeat_interleave(group, 0);
    }
  }
  rows_per_source *= group;
  for (auto& cache : cross_attention) cache.group = rows_per_source;
}

}  // namespace fitsum::model
