// Implements include/fitsum/kernels/few_rows_linear.h.
#include "fitsum/kernels/few_rows_linear.h"

#include <algorithm>

#include <immintrin.h>
#include <ATen/Parallel.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "fitsum/kernels/onednn_linear.h"
#include "fitsum/util/threads.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::kernels {
namespace {

// GCC 12 reports the intrinsics' deliberately undefined vectors (_mm512_undefined_ps inside the headers' broadcasts
// and reductions) as maybe used uninitialized where they are inlined, i.e. in the kernel below.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// acc[4 * j + i] holds 16 partial sums of (x row i) . (weight row j); returns one vector whose lane 4 * i + j is
// the sum of acc[4 * j + i]'s lanes. Four levels, each adding pairs: 256-bit halves, then 128-bit quarters, then
// pairs and single lanes within the quarters.
__attribute__((target("avx512f"))) inline __m512 reduce_tile(const __m512* acc) {
  __m512 halves[8];
  for (int p = 0; p < 8; ++p) {
    halves[p] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], 0x44),
                              _mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], 0xEE));
  }
  __m512 quarters[4];
  for (int r = 0; r < 4; ++r) {
    quarters[r] = _mm512_add_ps(_mm512_shuffle_f32x4(halves[2 * r], halves[2 * r + 1], 0x88),
                                _mm512_shuffle_f32x4(halves[2 * r], halves[2 * r + 1], 0xDD));
  }
  __m512 pairs[2];
  for (int s = 0; s < 2; ++s) {
    pairs[s] = _mm512_add_ps(_mm512_shuffle_ps(quarters[2 * s], quarters[2 * s + 1], 0x88),
                             _mm512_shuffle_ps(quarters[2 * s], quarters[2 * s + 1], 0xDD));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(pairs[0], pairs[1], 0x88), _mm512_shuffle_ps(pairs[0], pairs[1], 0xDD));
}

// One dot product of k (a multiple of 16) floats, for the rows that do not fill a tile (summed in another order
// than a tile's: a row's outputs may differ in the last bits between batches of different sizes, as BLAS's do).
__attribute__((target("avx512f"))) inline float dot(const float* a, const float* b, std::int64_t k) {
  __m512 sum = _mm512_setzero_ps();
  for (std::int64_t c = 0; c < k; c += 16) sum = _mm512_fmadd_ps(_mm512_loadu_ps(a + c), _mm512_loadu_ps(b + c), sum);
  return _mm512_reduce_add_ps(sum);
}

struct Problem {
  const float* x;     // (m, k)
  const float* w;     // (n, k)
  const float* bias;  // (n) or null
  float* y;           // (m, n)
  std::int64_t m, k, n;
};

// y[:, begin:end] of the problem.
__attribute__((target("avx512f"))) void columns(const Problem& p, std::int64_t begin, std::int64_t end) {
  const std::int64_t k = p.k;
  std::int64_t col = begin;
  for (; col + 4 <= end; col += 4) {
    const float* w = p.w + col * k;
    // The next 4 weight rows, requested into L2 while the first tile of these computes (over the 8 KB of a 512-wide
    // weight, 4 cache lines per step of 16): reading the weight then overlaps the arithmetic instead of stalling
    // the first tile of every group (the LM head at 8 rows: ~28 -> ~22 ms on one core of the development machine).
    const float* next = col + 8 <= end ? w + 4 * k : nullptr;
    std::int64_t row = 0;
    for (; row + 4 <= p.m; row += 4) {
      const float* x = p.x + row * k;
      __m512 acc[16];
      for (auto& a : acc) a = _mm512_setzero_ps();
      const bool prefetch = row == 0 && next != nullptr;
      for (std::int64_t c = 0; c < k; c += 16) {
        if (prefetch) {
          for (int j = 0; j < 4; ++j) _mm_prefetch(reinterpret_cast<const char*>(next + j * k + c), _MM_HINT_T1);
        }
        const __m512 x0 = _mm512_loadu_ps(x + c);
        const __m512 x1 = _mm512_loadu_ps(x + k + c);
        const __m512 x2 = _mm512_loadu_ps(x + 2 * k + c);
        const __m512 x3 = _mm512_loadu_ps(x + 3 * k + c);
        // Written out: GCC keeps acc in registers only when every index is a constant.
#define FITSUM_WEIGHT_ROW(j)                                      \
  {                                                               \
    const __m512 wj = _mm512_loadu_ps(w + (j)*k + c);             \
    acc[4 * (j) + 0] = _mm512_fmadd_ps(x0, wj, acc[4 * (j) + 0]); \
    acc[4 * (j) + 1] = _mm512_fmadd_ps(x1, wj, acc[4 * (j) + 1]); \
    acc[4 * (j) + 2] = _mm512_fmadd_ps(x2, wj, acc[4 * (j) + 2]); \
    acc[4 * (j) + 3] = _mm512_fmadd_ps(x3, wj, acc[4 * (j) + 3]); \
  }
        FITSUM_WEIGHT_ROW(0)
        FITSUM_WEIGHT_ROW(1)
        FITSUM_WEIGHT_ROW(2)
        FITSUM_WEIGHT_ROW(3)
#undef FITSUM_WEIGHT_ROW
      }
      __m512 sums = reduce_tile(acc);
      if (p.bias != nullptr) sums = _mm512_add_ps(sums, _mm512_broadcast_f32x4(_mm_loadu_ps(p.bias + col)));
      alignas(64) float tile[16];
      _mm512_store_ps(tile, sums);
      for (int i = 0; i < 4; ++i) _mm_storeu_ps(p.y + (row + i) * p.n + col, _mm_load_ps(tile + 4 * i));
    }
    for (; row < p.m; ++row) {
      for (int j = 0; j < 4; ++j) {
        const float b = p.bias != nullptr ? p.bias[col + j] : 0.0f;
        p.y[row * p.n + col + j] = dot(p.x + row * k, w + j * k, k) + b;
      }
    }
  }
  for (; col < end; ++col) {
    const float b = p.bias != nullptr ? p.bias[col] : 0.0f;
    for (std::int64_t row = 0; row < p.m; ++row) p.y[row * p.n + col] = dot(p.x + row * k, p.w + col * k, k) + b;
  }
}

// probs rows [row, row + R) times value: y[i, :] = sum over t of p[i, t] * v[t, :], the sum taken in t's order.
// Columns of d in blocks of 64 (4 registers per row), then of 16.
template <int R>
__attribute__((target("avx512f"))) void context_rows(const float* p, const float* v, float* y, std::int64_t s,
                                                     std::int64_t d) {
  std::int64_t col = 0;
  for (; col + 64 <= d; col += 64) {
    __m512 acc[4 * R];
#pragma GCC unroll 32
    for (int a = 0; a < 4 * R; ++a) acc[a] = _mm512_setzero_ps();
    for (std::int64_t t = 0; t < s; ++t) {
      const float* vt = v + t * d + col;
      const __m512 v0 = _mm512_loadu_ps(vt);
      const __m512 v1 = _mm512_loadu_ps(vt + 16);
      const __m512 v2 = _mm512_loadu_ps(vt + 32);
      const __m512 v3 = _mm512_loadu_ps(vt + 48);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512 pi = _mm512_set1_ps(p[i * s + t]);
        acc[4 * i + 0] = _mm512_fmadd_ps(pi, v0, acc[4 * i + 0]);
        acc[4 * i + 1] = _mm512_fmadd_ps(pi, v1, acc[4 * i + 1]);
        acc[4 * i + 2] = _mm512_fmadd_ps(pi, v2, acc[4 * i + 2]);
        acc[4 * i + 3] = _mm512_fmadd_ps(pi, v3, acc[4 * i + 3]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      for (int j = 0; j < 4; ++j) _mm512_storeu_ps(y + i * d + col + 16 * j, acc[4 * i + j]);
    }
  }
  for (; col < d; col += 16) {
    __m512 acc[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
    for (std::int64_t t = 0; t < s; ++t) {
      const __m512 vt = _mm512_loadu_ps(v + t * d + col);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(p[i * s + t]), vt, acc[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) _mm512_storeu_ps(y + i * d + col, acc[i]);
  }
}

// m rows of probs (m, s) times value (s, d).
__attribute__((target("avx512f"))) void context_item(const float* p, const float* v, float* y, std::int64_t m,
                                                     std::int64_t s, std::int64_t d) {
  std::int64_t row = 0;
  for (; row + 4 <= m; row += 4) context_rows<4>(p + row * s, v, y + row * d, s, d);
  for (; row < m; ++row) context_rows<1>(p + row * s, v, y + row * d, s, d);
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

#ifdef _OPENMP
// Threads for `pieces` independent pieces of work of `fmas_per_piece` multiply-adds each: as many as the BLAS products
// this replaces would use (OpenBLAS's own pool where fitsum leaves LibTorch's intra-op pool at one thread, see
// util/threads.h), each with at least ~half a million multiply-adds, below which starting a thread costs more than
// it saves, and no more than there are pieces. OpenMP directly: ATen's parallel_for runs on at::get_num_threads().
std::int64_t team_size(std::int64_t pieces, std::int64_t fmas_per_piece) {
  return std::min<std::int64_t>(product_threads(pieces * fmas_per_piece), pieces);
}
#endif

bool is_cpu_float(const at::Tensor& t) {
  return t.device().is_cpu() && t.layout() == at::kStrided && t.scalar_type() == at::kFloat;
}

}  // namespace

bool few_rows_kernel_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!cpu_has_avx512() || !graph_free_float_linear(x, weight, bias)) return false;
  const auto k = weight.size(1);
  return k != 0 && k % 16 == 0 && x.numel() / k <= few_rows_limit;
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool training) {
  if (weight.scalar_type() == at::kBFloat16 && x.scalar_type() == at::kFloat && !weight.requires_grad()) {
    return frozen_bfloat16_linear(x, weight, bias, training);  // a LoRA base held in bfloat16 (model/lora.h)
  }
  if (training) return dense_linear(x, weight, bias);
  if (!few_rows_kernel_applies(x, weight, bias)) {
    if (!onednn_linear_applies(x, weight, bias)) return torch::nn::functional::linear(x, weight, bias);
    return onednn_linear(x, weight, bias);
  }
  // Named in LibTorch's profiler (fitsum bench --profile) beside the aten:: operations.
  RECORD_FUNCTION("fitsum::few_rows_linear", std::vector<c10::IValue>{});
  const auto k = weight.size(1);
  const auto n = weight.size(0);
  const auto input = x.contiguous();
  const auto m = input.numel() / k;
  auto sizes = input.sizes().vec();
  sizes.back() = n;
  auto y = at::empty(sizes, input.options());
  if (m == 0 || n == 0) return y;
  const Problem p{input.data_ptr<float>(),
                  weight.data_ptr<float>(),
                  bias.defined() ? bias.data_ptr<float>() : nullptr,
                  y.data_ptr<float>(),
                  m,
                  k,
                  n};
  // Threads share the weight's rows in groups of 4 (team_size: a 512 x 512 weight at fewer than 4 rows stays on one).
  // Built without OpenMP (clang's builds, CMakeLists.txt), one thread, with the same results.
#ifdef _OPENMP
  const std::int64_t groups = (n + 3) / 4;
  const std::int64_t threads = team_size(groups, 4 * m * k);
  if (threads > 1 && !omp_in_parallel()) {
    const std::int64_t share = (groups + threads - 1) / threads;
    const int team = static_cast<int>(threads);
#pragma omp parallel num_threads(team)
    {
      const std::int64_t begin = omp_get_thread_num() * share;
      if (begin < groups) columns(p, begin * 4, std::min(n, (begin + share) * 4));
    }
    return y;
  }
#endif
  columns(p, 0, n);
  return y;
}

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b, bool training) {
  if (training) return dense_matmul(a, b);
  if (!onednn_matmul_applies(a, b)) return torch::matmul(a, b);
  return onednn_matmul(a, b);
}

namespace {

// body(i) for i in [0, items), on team_size's threads, as linear()'s weight rows.
template <typename Body>
void for_each_item(std::int64_t items, std::int64_t fmas_per_item, const Body& body) {
#ifdef _OPENMP
  const std::int64_t threads = team_size(items, fmas_per_item);
  if (threads > 1 && !omp_in_parallel()) {
    const int team = static_cast<int>(threads);
#pragma omp parallel for num_threads(team) schedule(static)
    for (std::int64_t i = 0; i < items; ++i) body(i);
    return;
  }
#endif
  for (std::int64_t i = 0; i < items; ++i) body(i);
}

// The product of the sizes before the last two.
std::int64_t batch_items(const at::Tensor& t) {
  std::int64_t items = 1;
  for (std::int64_t d = 0; d + 2 < t.dim(); ++d) items *= t.size(d);
  return items;
}

}  // namespace

bool few_rows_attention_applies(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value) {
  if (!cpu_has_avx512() || !is_cpu_float(query) || !is_cpu_float(key) || !is_cpu_float(value)) return false;
  const auto dims = query.dim();
  if (dims < 3 || key.dim() != dims || value.dim() != dims) return false;
  const auto batch = query.sizes().slice(0, dims - 2);
  if (key.sizes().slice(0, dims - 2) != batch || value.sizes().slice(0, dims - 2) != batch) return false;
  const auto width = query.size(-1);
  if (width == 0 || width % 16 != 0 || key.size(-1) != width || query.size(-2) > few_rows_limit) return false;
  if (value.size(-2) != key.size(-2) || value.size(-1) == 0 || value.size(-1) % 16 != 0) return false;
  if (util::autocast_enabled(c10::DeviceType::CPU)) return false;
  return !(at::GradMode::is_enabled() && (query.requires_grad() || key.requires_grad() || value.requires_grad()));
}

at::Tensor few_rows_scores(const at::Tensor& query, const at::Tensor& key) {
  TORCH_CHECK(few_rows_attention_applies(query, key, key), "few_rows_scores: query ", query.sizes(), " and key ",
              key.sizes(), " are not for the kernel");
  RECORD_FUNCTION("fitsum::few_rows_scores", std::vector<c10::IValue>{});
  const auto q = query.contiguous();
  const auto k = key.contiguous();
  const auto m = q.size(-2), width = q.size(-1), n = k.size(-2);
  auto sizes = q.sizes().vec();
  sizes.back() = n;
  auto y = at::empty(sizes, q.options());
  if (y.numel() == 0) return y;
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for_each_item(batch_items(q), m * n * width, [&](std::int64_t i) {
    columns(Problem{qp + i * m * width, kp + i * n * width, nullptr, yp + i * m * n, m, width, n}, 0, n);
  });
  return y;
}

at::Tensor few_rows_context(const at::Tensor& probs, const at::Tensor& value) {
  const auto dims = probs.dim();
  TORCH_CHECK(
      cpu_has_avx512() && is_cpu_float(probs) && is_cpu_float(value) && dims >= 3 && value.dim() == dims &&
          probs.sizes().slice(0, dims - 2) == value.sizes().slice(0, dims - 2) && probs.size(-1) == value.size(-2) &&
          probs.size(-2) <= few_rows_limit && value.size(-1) > 0 && value.size(-1) % 16 == 0,
      "few_rows_context: probabilities ", probs.sizes(), " and values ", value.sizes(), " are not for the kernel");
  RECORD_FUNCTION("fitsum::few_rows_context", std::vector<c10::IValue>{});
  const auto p = probs.contiguous();
  const auto v = value.contiguous();
  const auto m = p.size(-2), s = p.size(-1), d = v.size(-1);
  auto sizes = p.sizes().vec();
  sizes.back() = d;
  auto y = at::empty(sizes, p.options());
  if (y.numel() == 0) return y;
  const float* pp = p.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for_each_item(batch_items(p), m * s * d,
                [&](std::int64_t i) { context_item(pp + i * m * s, vp + i * s * d, yp + i * m * d, m, s, d); });
  return y;
}

}  // namespace fitsum::kernels
