// Implements include/fitsum/memory/evaluation_memory.h. Sizes are counted in doubles (no overflow for any config
// the static checks let through) and rounded up once.
#include "fitsum/memory/evaluation_memory.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "fitsum/model/loss.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::memory {

namespace {

struct Widths {
  double d = 0, ffn_encoder = 0, ffn_decoder = 0, heads_encoder = 0, heads_decoder = 0, layers = 0, vocab = 0;
  // Bytes of an activation. Under CPU autocast (bf16) the measured phases stay within 6% of fp32's (the softmaxes,
  // layer norms, residual sums and the loss are float32), so they are counted as fp32: an upper bound.
  double act = 4;
};

Widths widths_of(const model::ModelConfig& c) {
  Widths w;
  w.d = static_cast<double>(c.d_model);
  w.ffn_encoder = static_cast<double>(c.encoder_ffn_dim);
  w.ffn_decoder = static_cast<double>(c.decoder_ffn_dim);
  w.heads_encoder = static_cast<double>(c.encoder_attention_heads);
  w.heads_decoder = static_cast<double>(c.decoder_attention_heads);
  w.layers = static_cast<double>(c.decoder_layers);
  w.vocab = static_cast<double>(c.vocab_size);
  return w;
}

// One layer over `rows` x `length` queries attending to `keys` positions with `heads` heads and `ffn` wide
// feed-forward: the larger of the attention block (the layer input, its norm, queries, keys, values and the context,
// plus what the attention path holds) and the feed-forward block (input, norm, the product and its activation).
// The math path (1.13) holds the scores and probabilities. The fused kernels of scaled_dot_product_attention (2.x)
// hold none; measured with LibTorch 2.14 on the CPU, an encoder layer then peaks at 11 (rows, S, d) tensors where
// the count above has 7, and the 4 more are counted as rows x (2 length + 2 keys) x d. That is exact for the encoder
// and loss passes but not yet attributed to tensors (the CPU flash kernel itself allocates only its output), and it
// over-counts decoding without the cache (docs/platforms.md).
double layer_peak(const Widths& w, double rows, double length, double keys, double heads, double ffn) {
  const double kernel =
      FITSUM_ATTENTION_KEEPS_SCORES ? 2.0 * rows * heads * length * keys : rows * (2.0 * length + 2.0 * keys) * w.d;
  const double attention = kernel + rows * (5.0 * length + 2.0 * keys) * w.d;
  const double feed_forward = rows * length * (2.0 * ffn + 2.0 * w.d);
  return w.act * std::max(attention, feed_forward);
}

double encoder_peak(const Widths& w, double rows, double source) {
  // The embeddings (scaled, plus positions) hold two (rows, S, D) tensors before the first layer.
  return std::max(layer_peak(w, rows, source, source, w.heads_encoder, w.ffn_encoder), 2.0 * w.act * rows * source * w.d);
}

// The decoder over `length` positions at once (the loss pass, or a step without the cache), beside the encoder
// output: the self-attention layer and the cross-attention layer, whichever is larger.
double decoder_peak(const Widths& w, double rows, double length, double source) {
  const double self = layer_peak(w, rows, length, length, w.heads_decoder, w.ffn_decoder);
  const double cross = layer_peak(w, rows, length, source, w.heads_decoder, w.ffn_decoder);
  return w.act * rows * source * w.d + std::max(self, cross);
}

// The encoder, then the decoder, then the fused head and loss (model/loss.h): without gradients it holds one chunk
// of float32 logits (every label token x chunk columns) beside the decoder output and its label rows.
double loss_peak(const Widths& w, const EvaluationLoad& load) {
  const double rows = static_cast<double>(load.batch);
  const double source = static_cast<double>(load.source_length);
  const double target = static_cast<double>(load.target_length);
  const double tokens = rows * target;
  const double chunk_bytes = static_cast<double>(model::LinearCrossEntropyOptions{}.chunk_bytes);
  const double chunk = std::min(w.vocab, std::max(256.0, std::floor(chunk_bytes / (4.0 * tokens))));
  const double head = 4.0 * tokens * chunk + 2.0 * w.act * tokens * w.d;
  return std::max({encoder_peak(w, rows, source), decoder_peak(w, rows, target, source), head});
}

// Generation: the encoder pass over the sources, then the steps. At the longest step the cache (keys and values,
// per decoder layer) holds cross-attention over S for every row and self-attention over the G positions so far;
// while a layer's self-attention cache grows its old and new copies are both alive. The next-token logits are
// float32 pairs: the product and its sum with final_logits_bias, then the log-softmax and its sum with the beam
// scores.
double generation_peak(const Widths& w, const EvaluationLoad& load, double* cache_bytes) {
  const double batch = static_cast<double>(load.batch);
  const double rows = batch * static_cast<double>(load.num_beams);
  const double source = static_cast<double>(load.source_length);
  const double generated = static_cast<double>(std::max<std::int64_t>(1, load.max_length - 1));
  const double logits = 2.0 * 4.0 * rows * w.vocab;
  const double encoder = encoder_peak(w, batch, source);
  const double mask = rows * source * 8.0;  // the int64 attention mask, one row per beam
  if (!load.use_cache) {
    *cache_bytes = 0;
    // Every step reruns the decoder over all positions, cross-attention keys and values recomputed per layer (and
    // made contiguous for the products: one more (R, S, D) copy at a time).
    const double step = decoder_peak(w, rows, generated, source) + w.act * rows * source * w.d;
    return std::max(encoder, mask + std::max(step, logits));
  }
  const double cross = 2.0 * w.layers * rows * source * w.d * w.act;
  const double self = 2.0 * w.layers * rows * generated * w.d * w.act;
  *cache_bytes = cross + self;
  const double growing = 2.0 * rows * generated * w.d * w.act;
  const double step = std::max(growing, logits);
  // The encoder's output for the sources (B rows) until the first step has computed the cross-attention cache.
  const double first_step = w.act * batch * source * w.d * (1.0 + 2.0 * w.layers) + 2.0 * w.act * rows * source * w.d;
  return std::max(encoder, mask + std::max(cross + self + step, first_step));
}

std::uint64_t bytes(double b) { return static_cast<std::uint64_t>(std::ceil(std::max(0.0, b))); }

}  // namespace

std::uint64_t EvaluationMemory::peak() const { return std::max({encoder, loss, generation}); }

EvaluationMemory predict_evaluation(const model::ModelConfig& config, const EvaluationLoad& load) {
  if (load.batch < 1 || load.source_length < 1 || load.target_length < 1 || load.num_beams < 1 ||
      load.max_length < 1) {
    throw std::invalid_argument("evaluation memory: batch, lengths and num_beams must be >= 1");
  }
  const auto w = widths_of(config);
  EvaluationMemory m;
  m.encoder = bytes(encoder_peak(w, static_cast<double>(load.batch), static_cast<double>(load.source_length)));
  if (load.compute_loss) m.loss = bytes(loss_peak(w, load));
  if (load.generate) {
    double cache = 0;
    m.generation = bytes(generation_peak(w, load, &cache));
    m.cache = bytes(cache);
  }
  return m;
}

std::int64_t largest_evaluation_batch(const model::ModelConfig& config, const EvaluationLoad& load,
                                      std::uint64_t available) {
  // Every term grows with the batch, so the largest batch that fits is found by bisection.
  std::int64_t low = 0;
  std::int64_t high = load.batch;
  while (low < high) {
    const auto mid = low + (high - low + 1) / 2;
    auto trial = load;
    trial.batch = mid;
    if (predict_evaluation(config, trial).peak() <= available) {
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  return low;
}

}  // namespace fitsum::memory
