// Implements include/fitsum/memory/evaluation_memory.h. Sizes are counted in doubles (no overflow for any config
// the static checks let through) and rounded up once.
#include "fitsum/memory/evaluation_memory.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <ATen/Parallel.h>

#include "fitsum/kernels/loss.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::memory {

namespace {

struct Widths {
  double d = 0, ffn_encoder = 0, ffn_decoder = 0, heads_encoder = 0, heads_decoder = 0, layers = 0, vocab = 0;
  // Bytes of a float32 activation: the layer inputs, residual sums, norms, softmaxes, the encoder output and the
  // logits are float32 under autocast too.
  double act = 4;
  // Bytes of a matrix product's output: 2 under CPU autocast (bf16), else 4.
  double product = 4;
  bool bf16 = false;
  // Pre-LayerNorm layers (PEGASUS, T5) hold the norm of the layer input beside it; post-LayerNorm ones (BART) not.
  double pre_norm = 1;
  // Under autocast a linear layer with a bias adds the float32 bias to the bfloat16 product in place: a float32
  // result and its conversion back, two float32 copies of the output, live together for a moment (aten::linear ->
  // matmul, add_ -> empty_like, _to_copy; measured on 1.13 and 2.14). T5 has no biases.
  bool float_bias_transient = false;
  // Feed-forward tensors of the width ffn at its peak: the product and its activation, or a gated feed-forward's
  // two products, the activation and their product (T5 v1.1).
  double ffn_tensors = 2;
  // Relative positions (T5): every self-attention adds a float32 (rows, heads, T, S) mask carrying the relative
  // position bias, computed once per stack and held while the stack runs.
  bool position_bias = false;
  // The LM head's logits get final_logits_bias added (PEGASUS, BART; not T5).
  bool logits_bias = true;
  double threads = 1;  // intra-op threads
  // The encoder's attention (model/config.h EncoderAttention) and its block structure: PEGASUS-X's blocks and global
  // tokens (with every odd layer staggered by half a block when there are two layers or more), LongT5's windows of
  // three blocks of local_radius + 1 positions plus, transient-global, one side key per global_block_size positions.
  model::EncoderAttention attention = model::EncoderAttention::full;
  double block = 0, globals = 0, global_block = 0;
  bool staggered = false;
};

Widths widths_of(const model::ModelConfig& c, bool bf16, std::int64_t threads) {
  Widths w;
  w.d = static_cast<double>(c.d_model);
  w.ffn_encoder = static_cast<double>(c.encoder_ffn_dim);
  w.ffn_decoder = static_cast<double>(c.decoder_ffn_dim);
  w.heads_encoder = static_cast<double>(c.encoder_attention_heads);
  w.heads_decoder = static_cast<double>(c.decoder_attention_heads);
  w.layers = static_cast<double>(c.decoder_layers);
  w.vocab = static_cast<double>(c.vocab_size);
  w.bf16 = bf16;
  w.product = bf16 ? 2.0 : 4.0;
  w.pre_norm = c.normalize_before ? 1.0 : 0.0;
  w.float_bias_transient = bf16 && c.linear_bias && !c.gated_ffn;
  w.ffn_tensors = c.gated_ffn ? 4.0 : 2.0;
  w.position_bias = c.position_embedding == model::PositionEmbedding::relative;
  w.logits_bias = c.has_final_logits_bias;
  w.threads = static_cast<double>(threads > 0 ? threads : at::get_num_threads());
  w.attention = c.encoder_attention;
  if (w.attention == model::EncoderAttention::global_local) {
    w.block = static_cast<double>(c.block_size);
    w.globals = static_cast<double>(c.num_global_tokens);
    w.staggered = c.stagger_local_blocks && c.encoder_layers > 1;
  } else if (w.attention != model::EncoderAttention::full) {
    w.block = static_cast<double>(c.local_radius + 1);
    w.global_block =
        w.attention == model::EncoderAttention::transient_global ? static_cast<double>(c.global_block_size) : 0.0;
  }
  return w;
}

// Bytes of one feed-forward block over `length` positions beside `inputs` float32 (rows, length, d) tensors: per
// element its tensors, or the bfloat16 product beside the float32 pair.
double feed_forward_peak(const Widths& w, double rows, double length, double ffn, double inputs) {
  const double per_element = w.float_bias_transient ? 10.0 : w.ffn_tensors * w.product;
  return rows * length * (per_element * ffn + (inputs + w.pre_norm) * w.act * w.d);
}

// One layer over `rows` x `length` queries attending to `keys` positions with `heads` heads and `ffn` wide
// feed-forward, beside `inputs` float32 (rows, length, d) tensors its caller holds (the layer's input; in a
// decoder's cross-attention also the self-attention's residual sum): the larger of the attention block and the
// feed-forward block. Measured against the tracking allocator on 1.13 and 2.14
// (tests/model/evaluation_memory_test.cpp).
// - Attention holds the inputs and the norm (float32), and 3 query-length and 2 key-length products (the queries,
//   the context and its copy or the output projection; the keys and the values).
// - On the math path (1.13) also the scores: float32, the sum with the mask and its softmax (8 bytes an element);
//   under autocast the bfloat16 product, its float32 sum with the mask, the softmax and the bfloat16 probabilities
//   for the next product (10 bytes at the peak).
// - The fused kernels of scaled_dot_product_attention (2.x) take the head-split views as they are and keep no
//   scores, only a float32 log-sum-exp per row, head and query. While they run, the queries, keys, values and the
//   kernel's output are alive (the context's copy and the output projection come after, when the kernel's own
//   buffers are gone: the larger of the two moments counts), and a (rows, heads, T, S) mask (T5's) is copied: under
//   autocast converted to bfloat16 and clamped (held until the layer's attention returns), then copied again by the
//   kernel (2 + 2 bytes an element); in float32 the kernel's copy alone (4 bytes). Under autocast the kernel may
//   also reorder the keys and values into bfloat16 blocks of its own (LibTorch 2.x's cpu_flash_attention, where
//   oneDNN can pack: only at >= 4 heads, heads of a multiple of 64 and >= 64 keys), outside LibTorch's allocator:
//   counted wherever the shape allows it, since whether it happens depends on the processor. Per thread the kernel
//   keeps float32 blocks of a query split's scores, maxima, sums and outputs, and under autocast the split's scores
//   in bfloat16 (query splits of 32, 64 or 256 rows from 192 and 768 queries on, key splits of 512). Traced against
//   the tracking allocator on 2.14 (T5 at head size 32, 4 x 128 tokens, 2 threads: 3.065 MiB, the query, key and
//   value products, the kernel's output, both mask copies, the held position bias and 57 KB of blocks).
// - Feed-forward: the layer's input, the residual sum and, pre-LayerNorm, its norm (float32), and the products.
double layer_peak(const Widths& w, double rows, double length, double keys, double heads, double ffn, double inputs) {
  const double held = rows * w.d * w.act * (inputs + w.pre_norm) * length;
  const double products = rows * w.d * w.product * (3.0 * length + 2.0 * keys);
  double attention = 0;
  if (FITSUM_ATTENTION_KEEPS_SCORES) {
    attention = held + products + (w.bf16 ? 10.0 : 8.0) * rows * heads * length * keys;
  } else {
    const double mask = w.position_bias ? rows * heads * length * keys : 0.0;  // elements
    const double head_size = w.d / heads;
    const bool packs = w.bf16 && heads >= 4 && std::fmod(head_size, 64.0) == 0.0 && keys >= 64;
    const double packed = packs ? 2.0 * w.product * rows * keys * w.d : 0.0;
    const double query_split = std::min(length, length >= 768 ? 256.0 : length >= 192 ? 64.0 : 32.0);
    const double key_split = std::min(keys, 512.0);
    const double blocks = w.threads * (4.0 * query_split * (key_split + 2.0 + head_size) +
                                       (w.bf16 ? w.product : 0.0) * query_split * key_split);
    const double in_kernel = held + rows * w.d * w.product * (2.0 * length + 2.0 * keys) + 4.0 * rows * heads * length +
                             packed + 4.0 * mask + blocks;
    const double after_kernel = held + products + (w.bf16 ? 2.0 * mask : 0.0);
    attention = std::max(in_kernel, after_kernel);
  }
  return std::max(attention, feed_forward_peak(w, rows, length, ffn, 2.0));
}

// T5's position-bias mask of a stack of self-attention over `length` queries and `keys` positions: float32, held
// while the stack runs.
double position_bias_mask(const Widths& w, double rows, double length, double keys, double heads) {
  return w.position_bias ? 4.0 * rows * heads * length * keys : 0.0;
}

// One PEGASUS-X layer (model/pegasus_x_layers.cpp) over the P positions padded to whole blocks of K, with G global
// tokens; a staggered layer pads P by another block (P'). Its attention holds the layer's inputs and their norms
// (float32), the projections of the tokens and the global tokens and the keys and values of both concatenated
// (products), the global tokens' attention output (their scores over G + P' keys are gone by then:
// kernels/attention_dropout.h computes each attention from its scores' operands to its context and returns only
// the context), and at its peak the blocks' scores against the global tokens and the block (products), their
// concatenation with the mask and its softmax
// (float32), and the contiguous copy of the probabilities of the global keys that the product with the global
// values (broadcast over the blocks) takes; the block's own product reads its probabilities in place. The
// scores grow with P' (G + K): linear in the source, not its square. The feed-forward block holds the attention's
// output (the local tokens', still referenced) beside the usual feed-forward terms.
double pegasus_x_layer_peak(const Widths& w, double rows, double source) {
  const double k = w.block, g = w.globals, heads = w.heads_encoder;
  const double padded = std::ceil(source / k) * k;
  const double p = padded + (w.staggered ? k : 0.0);
  const double held = rows * w.d * w.act * (padded + g + p + g);
  const double products = rows * w.d * w.product * (3.0 * p + 3.0 * g + 2.0 * (g + p));
  const double global = w.act * rows * g * w.d;
  const double local = rows * heads * p * ((g + k) * (w.product + 8.0) + 4.0 * g);
  const double attention = held + products + global + local;
  const double feed_forward = w.act * rows * p * w.d + feed_forward_peak(w, rows, padded, w.ffn_encoder, 2.0);
  return std::max(attention, feed_forward);
}

// One LongT5 block (model/long_t5_layers.cpp) over S positions in N blocks of K, each attending to a window of 3K
// keys plus, transient-global, the floor(S / global_block_size) side keys (W keys in all). The first block's float32
// position bias (rows, N, heads, K, W) is held by the stack for every block. The attention holds the block's input
// and its norm (float32), the queries and the three-block windows of keys and values (products), and at its peak the
// scores, their sum with the bias and the softmax (float32, two of them alive at once beside the bias), and the
// contiguous copies of the queries (the side keys' product broadcasts over the blocks) and of the window's values.
double long_t5_layer_peak(const Widths& w, double rows, double source) {
  const double k = w.block, heads = w.heads_encoder;
  const double blocks = std::ceil(source / k);
  const double side = w.global_block > 0 ? std::floor(source / w.global_block) : 0.0;
  const double keys = 3.0 * k + side;
  const double scores = rows * blocks * heads * k * keys;  // elements
  const double bias = 4.0 * scores;
  const double window = rows * blocks * k * w.d;
  const double held = rows * source * w.d * w.act * 2.0;
  const double products = w.product * window * (1.0 + 3.0 + 3.0) + w.product * rows * side * w.d * 3.0;
  const double attention = bias + held + products + 8.0 * scores + w.product * 4.0 * window;
  // The first block builds the bias: the local part and the side bias with its mask, their sum and its blocked copy.
  const double first =
      held + 4.0 * rows * blocks * heads * k * 3.0 * k * 2.0 + 4.0 * rows * heads * source * side * 4.0 + bias;
  return std::max({attention, first, bias + feed_forward_peak(w, rows, source, w.ffn_encoder, 2.0)});
}

double encoder_peak(const Widths& w, double rows, double source) {
  if (w.attention == model::EncoderAttention::global_local) {
    // The embeddings (scaled, plus positions) and their copy padded to whole blocks.
    return std::max(pegasus_x_layer_peak(w, rows, source), 3.0 * w.act * rows * source * w.d);
  }
  if (w.attention != model::EncoderAttention::full) {
    return std::max(long_t5_layer_peak(w, rows, source), 2.0 * w.act * rows * source * w.d);
  }
  // The embeddings (scaled, plus positions) hold two (rows, S, D) tensors before the first layer.
  return std::max(layer_peak(w, rows, source, source, w.heads_encoder, w.ffn_encoder, 1.0) +
                      position_bias_mask(w, rows, source, source, w.heads_encoder),
                  2.0 * w.act * rows * source * w.d);
}

// The decoder over `length` positions at once (the loss pass, or a step without the cache), beside the encoder
// output: the self-attention layer and the cross-attention layer, whichever is larger.
double decoder_peak(const Widths& w, double rows, double length, double source) {
  const double self = layer_peak(w, rows, length, length, w.heads_decoder, w.ffn_decoder, 1.0);
  const double cross = layer_peak(w, rows, length, source, w.heads_decoder, w.ffn_decoder, 2.0);
  return w.act * rows * source * w.d + std::max(self, cross) +
         position_bias_mask(w, rows, length, length, w.heads_decoder);
}

// The encoder, then the decoder, then the fused head and loss (kernels/loss.h): without gradients it holds one chunk
// of float32 logits (every label token x chunk columns) beside the decoder output and its label rows.
double loss_peak(const Widths& w, const EvaluationLoad& load) {
  const double rows = static_cast<double>(load.batch);
  const double source = static_cast<double>(load.source_length);
  const double target = static_cast<double>(load.target_length);
  const double tokens = rows * target;
  const double chunk_bytes = static_cast<double>(kernels::LinearCrossEntropyOptions{}.chunk_bytes);
  const double chunk = std::min(w.vocab, std::max(256.0, std::floor(chunk_bytes / (4.0 * tokens))));
  const double head = 4.0 * tokens * chunk + 2.0 * w.act * tokens * w.d;
  return std::max({encoder_peak(w, rows, source), decoder_peak(w, rows, target, source), head});
}

// Generation: the encoder pass over the sources, then the steps. At the longest step the cache (keys and values,
// per decoder layer) holds cross-attention over S once per source (its beams share it) and self-attention over the
// G positions so far for every row;
// while a layer's self-attention cache grows its old and new copies are both alive. The next-token logits are
// float32 pairs: the product and its sum with final_logits_bias, then the log-softmax and its sum with the beam
// scores. Under autocast the cached keys and values are the projections' bfloat16 products, each step's logits are
// a bfloat16 product first (still alive while final_logits_bias is added to its float32 copy; without that bias,
// T5's, it is freed before the log-softmax), and the LM head's weight is cast to bfloat16 once and held until the
// region ends (autocast's cache of a trainable leaf's copy; measured against the tracking allocator).
double generation_peak(const Widths& w, const EvaluationLoad& load, double* cache_bytes) {
  const double batch = static_cast<double>(load.batch);
  const double rows = batch * static_cast<double>(load.num_beams);
  const double source = static_cast<double>(load.source_length);
  const double generated = static_cast<double>(std::max<std::int64_t>(1, load.max_length - 1));
  const double logits = 2.0 * 4.0 * rows * w.vocab + (w.bf16 && w.logits_bias ? w.product * rows * w.vocab : 0.0);
  const double head_weight = w.bf16 ? w.product * w.vocab * w.d : 0.0;
  const double encoder = encoder_peak(w, batch, source);
  if (!load.use_cache) {
    const double mask = rows * source * 8.0;  // the int64 attention mask, one row per beam
    *cache_bytes = 0;
    // Every step reruns the decoder over all positions, cross-attention keys and values recomputed per layer; the
    // math path's products make them contiguous (one more (R, S, D) copy at a time), the fused kernels do not.
    const double copy = FITSUM_ATTENTION_KEEPS_SCORES ? w.product * rows * source * w.d : 0.0;
    const double step = decoder_peak(w, rows, generated, source) + copy;
    return std::max(encoder, mask + head_weight + std::max(step, logits));
  }
  const double mask = batch * source * 8.0;  // the int64 attention mask, one row per source
  const double cross = 2.0 * w.layers * batch * source * w.d * w.product;
  const double self = 2.0 * w.layers * rows * generated * w.d * w.product;
  *cache_bytes = cross + self;
  const double growing = 2.0 * rows * generated * w.d * w.product;
  const double step = std::max(growing, logits);
  // The encoder's output for the sources until the first step has computed the cross-attention cache.
  const double first_step = batch * source * w.d * (w.act + 2.0 * w.layers * w.product);
  return std::max(encoder, mask + std::max(head_weight + cross + self + step, first_step));
}

std::uint64_t bytes(double b) { return static_cast<std::uint64_t>(std::ceil(std::max(0.0, b))); }

}  // namespace

std::uint64_t EvaluationMemory::peak() const { return std::max({encoder, loss, generation}); }

EvaluationMemory predict_evaluation(const model::ModelConfig& config, const EvaluationLoad& load) {
  if (load.batch < 1 || load.source_length < 1 || load.target_length < 1 || load.num_beams < 1 || load.max_length < 1) {
    throw std::invalid_argument("evaluation memory: batch, lengths and num_beams must be >= 1");
  }
  const auto w = widths_of(config, load.bf16, load.threads);
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
