// Implements include/fitsum/generate/logits_processors.h, after transformers' generation/logits_process.py.
#include "fitsum/generate/logits_processors.h"

#include <algorithm>
#include <limits>

#include <torch/torch.h>

namespace fitsum::generate {

namespace {
constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();
}

std::vector<std::int64_t> banned_ngram_tokens(const std::int64_t* row, std::int64_t length, std::int64_t n) {
  std::vector<std::int64_t> banned;
  // HF: no ban until cur_len + 1 >= n, i.e. until the next token could complete an n-gram.
  if (n <= 0 || length + 1 < n) {
    return banned;
  }
  // The (n-1)-gram that the next token would complete is the row's last n-1 tokens; every earlier occurrence of it
  // bans the token that followed. (HF builds a dict of all prefixes and looks this one up: the same tokens, in the
  // same order.)
  const std::int64_t* tail = row + length - (n - 1);
  for (std::int64_t start = 0; start + n <= length; ++start) {
    if (std::equal(row + start, row + start + n - 1, tail)) {
      banned.push_back(row[start + n - 1]);
    }
  }
  return banned;
}

void ban_repeated_ngrams(const at::Tensor& scores, const at::Tensor& sequences, std::int64_t ngram_size) {
  TORCH_CHECK(sequences.device().is_cpu() && sequences.scalar_type() == torch::kLong && sequences.dim() == 2,
              "ban_repeated_ngrams: sequences must be (rows, length) int64 on the CPU");
  TORCH_CHECK(scores.size(0) == sequences.size(0), "ban_repeated_ngrams: ", scores.size(0), " score rows for ",
              sequences.size(0), " sequences");
  const auto rows = sequences.contiguous();
  const auto length = rows.size(1);
  const auto* data = rows.data_ptr<std::int64_t>();
  std::vector<std::int64_t> banned_rows;
  std::vector<std::int64_t> banned_tokens;
  for (std::int64_t r = 0; r < rows.size(0); ++r) {
    for (auto token : banned_ngram_tokens(data + r * length, length, ngram_size)) {
      banned_rows.push_back(r);
      banned_tokens.push_back(token);
    }
  }
  if (banned_rows.empty()) {
    return;
  }
  const auto device = scores.device();
  auto row_index = torch::tensor(banned_rows, torch::kLong).to(device);
  auto token_index = torch::tensor(banned_tokens, torch::kLong).to(device);
  at::Tensor target = scores;  // a handle to the same storage (index_put_ is not const in LibTorch 1.13)
  target.index_put_({row_index, token_index}, kMinusInfinity);
}

void apply_min_length(const at::Tensor& scores, std::int64_t cur_length, std::int64_t min_length,
                      std::int64_t eos_token_id) {
  if (cur_length < min_length) {
    scores.select(1, eos_token_id).fill_(kMinusInfinity);
  }
}

void apply_forced_bos(const at::Tensor& scores, std::int64_t cur_length, std::int64_t forced_bos_token_id) {
  if (forced_bos_token_id >= 0 && cur_length == 1) {
    scores.fill_(kMinusInfinity);
    scores.select(1, forced_bos_token_id).fill_(0.0);
  }
}

void apply_forced_eos(const at::Tensor& scores, std::int64_t cur_length, std::int64_t max_length,
                      std::int64_t forced_eos_token_id) {
  if (forced_eos_token_id >= 0 && cur_length == max_length - 1) {
    scores.fill_(kMinusInfinity);
    scores.select(1, forced_eos_token_id).fill_(0.0);
  }
}

void apply_logits_processors(const at::Tensor& scores, const at::Tensor& sequences, const GenerationOptions& options) {
  const auto cur_length = sequences.size(1);
  if (options.no_repeat_ngram_size > 0) {
    ban_repeated_ngrams(scores, sequences, options.no_repeat_ngram_size);
  }
  if (options.min_length > 0) {
    apply_min_length(scores, cur_length, options.min_length, options.eos_token_id);
  }
  apply_forced_bos(scores, cur_length, options.forced_bos_token_id);
  apply_forced_eos(scores, cur_length, options.effective_max_length(), options.forced_eos_token_id);
}

}  // namespace fitsum::generate
