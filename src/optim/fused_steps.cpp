// Implements include/fitsum/optim/fused_steps.h. Each function mirrors the tensor-op version in optimizers.cpp
// (and through it torch.optim.AdamW / transformers' Adafactor) operation by operation, in float32, so that the
// result differs from it only by the order of summation inside the means and norms.
#include "fitsum/optim/fused_steps.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

namespace fitsum::optim {

namespace {

// Sums are split over at most this many fixed blocks of rows, so their rounding never depends on the thread count.
constexpr std::int64_t kBlocks = 64;
// Tensors below this many elements are updated by the calling thread alone: a parallel region costs more than it
// saves on them, and on a busy machine a region waits for every one of its threads to be scheduled.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 22;

// Grain for at::parallel_for over `range` items of `items_size` elements each: one task for small tensors.
std::int64_t grain_for(std::int64_t range, std::int64_t item_elements, std::int64_t parallel_grain) {
  return range * item_elements < kParallelElements ? range + 1 : parallel_grain;
}

struct Blocks {
  std::int64_t size = 1;   // rows per block
  std::int64_t count = 0;  // blocks
};

Blocks split_rows(std::int64_t rows) {
  Blocks b;
  b.size = std::max<std::int64_t>(1, (rows + kBlocks - 1) / kBlocks);
  b.count = (rows + b.size - 1) / b.size;
  return b;
}

void check_same(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == at::kFloat && a.is_contiguous() && a.sizes() == b.sizes(),
              "fused optimizer step: ", what, " must be contiguous float32 of shape ", b.sizes(), ", got ",
              a.scalar_type(), " ", a.sizes());
}

// The row loops below are compiled twice, for AVX2 and for plain x86-64 (the loader picks what the processor
// runs). Sums go into kLanes fixed accumulators, which vectorises them without making the result depend on
// anything but the data. No fused multiply-add is enabled, so every float operation rounds as the tensor ops do.
constexpr int kLanes = 8;

// Every gradient element is read as g * scale (clipping's factor; exactly g when scale is 1), which rounds as
// clip_grad_norm's in-place multiply does.

// For one row: adds u = (g * scale)^2 + eps1 into col_partial[c] and returns the sum of u over the row.
__attribute__((target_clones("avx2", "default"))) double add_squares(const float* g, double* col_partial,
                                                                     std::int64_t cols, float eps1, float scale) {
  double lanes[kLanes] = {};
  std::int64_t c = 0;
  for (; c + kLanes <= cols; c += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float gk = g[c + k] * scale;
      const float u = gk * gk + eps1;
      lanes[k] += u;
      col_partial[c + k] += u;
    }
  }
  double sum = 0.0;
  for (; c < cols; ++c) {
    const float gc = g[c] * scale;
    const float u = gc * gc + eps1;
    sum += u;
    col_partial[c] += u;
  }
  for (const double lane : lanes) sum += lane;
  return sum;
}

// For one row: the sum over c of (row_factor * col_factor[c] * g[c] * scale)^2.
__attribute__((target_clones("avx2", "default"))) double update_squares(const float* g, const float* col_factor,
                                                                        std::int64_t cols, float row_factor,
                                                                        float scale) {
  double lanes[kLanes] = {};
  std::int64_t c = 0;
  for (; c + kLanes <= cols; c += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float u = row_factor * col_factor[c + k] * (g[c + k] * scale);
      lanes[k] += static_cast<double>(u) * u;
    }
  }
  double sum = 0.0;
  for (; c < cols; ++c) {
    const float u = row_factor * col_factor[c] * (g[c] * scale);
    sum += static_cast<double>(u) * u;
  }
  for (const double lane : lanes) sum += lane;
  return sum;
}

// For one row: p = p - lr * wd * p - lr * (row_factor * col_factor * g * scale) / divisor, in HF's order of
// operations; g is zeroed behind the read when `zero`.
struct RowUpdate {
  float row_factor, divisor, lr, neg_decay, scale;
  bool decays, zero;
};

__attribute__((target_clones("avx2", "default"))) void update_row(float* p, float* g, const float* col_factor,
                                                                  std::int64_t cols, const RowUpdate& r) {
  const float row_factor = r.row_factor, divisor = r.divisor, lr = r.lr, neg_decay = r.neg_decay, scale = r.scale;
  for (std::int64_t c = 0; c < cols; ++c) {
    float u = row_factor * col_factor[c] * (g[c] * scale);
    u = u / divisor;
    u = u * lr;
    float pi = p[c];
    if (r.decays) pi = pi + neg_decay * pi;
    p[c] = pi + (-u);
  }
  if (r.zero) std::fill(g, g + cols, 0.0f);
}

}  // namespace

bool fused_step_applies(const at::Tensor& param, const at::Tensor& grad) {
  return param.device().is_cpu() && grad.device().is_cpu() && param.scalar_type() == at::kFloat &&
         grad.scalar_type() == at::kFloat && param.is_contiguous() && grad.is_contiguous() && !grad.is_sparse() &&
         param.dim() <= 2;
}

void fused_adamw_step(at::Tensor& param, at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                      const AdamWStepScalars& s) {
  check_same(grad, param, "grad");
  check_same(exp_avg, param, "exp_avg");
  check_same(exp_avg_sq, param, "exp_avg_sq");
  float* p = param.data_ptr<float>();
  float* g = grad.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  // The scalars as the tensor ops see them: computed in double, applied as float.
  const auto decay = static_cast<float>(1.0 - s.lr * s.weight_decay);
  const auto beta1 = static_cast<float>(s.beta1);
  const auto one_minus_beta1 = static_cast<float>(1.0 - s.beta1);
  const auto beta2 = static_cast<float>(s.beta2);
  const auto one_minus_beta2 = static_cast<float>(1.0 - s.beta2);
  const double bias_correction1 = 1.0 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(s.beta2, static_cast<double>(s.step));
  const auto neg_step_size = static_cast<float>(-(s.lr / bias_correction1));
  const auto sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
  const auto eps = static_cast<float>(s.eps);
  const bool decays = s.weight_decay != 0.0;
  const auto scale = static_cast<float>(s.grad_scale);
  const std::int64_t n = param.numel();
  at::parallel_for(0, n, grain_for(n, 1, std::int64_t{1} << 16), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      float pi = decays ? p[i] * decay : p[i];
      const float gi = g[i] * scale;
      const float mi = m[i] * beta1 + one_minus_beta1 * gi;
      const float vi = v[i] * beta2 + one_minus_beta2 * gi * gi;
      const float denom = std::sqrt(vi) / sqrt_bias_correction2 + eps;
      pi = pi + neg_step_size * mi / denom;
      m[i] = mi;
      v[i] = vi;
      p[i] = pi;
    }
    if (s.zero_grad) std::fill(g + begin, g + end, 0.0f);
  });
}

namespace {

// HF Adafactor's factored second moment of a (rows, cols) gradient: pass 1 over the gradient (means of
// grad^2 + eps1 along each row and column), the decayed state row/col, and the factors of _approx_sq_grad:
// (row / mean(row)).rsqrt() and col.rsqrt().
struct Factors {
  std::vector<float> row, col;
};

Factors second_moment_factors(const float* g, float* row, float* col, std::int64_t rows, std::int64_t cols,
                              const Blocks& blocks, const AdafactorStepScalars& s) {
  const auto eps1 = static_cast<float>(s.eps1);
  const auto scale = static_cast<float>(s.grad_scale);
  const auto beta2t = static_cast<float>(s.beta2t);
  const auto one_minus_beta2t = static_cast<float>(1.0 - s.beta2t);
  std::vector<float> row_mean(static_cast<std::size_t>(rows));
  std::vector<double> col_partial(static_cast<std::size_t>(blocks.count * cols), 0.0);
  at::parallel_for(0, blocks.count, grain_for(blocks.count, blocks.size * cols, 1),
                   [&](std::int64_t first, std::int64_t last) {
                     for (std::int64_t b = first; b < last; ++b) {
                       double* partial = col_partial.data() + b * cols;
                       for (std::int64_t r = b * blocks.size; r < std::min(rows, (b + 1) * blocks.size); ++r) {
                         const double sum = add_squares(g + r * cols, partial, cols, eps1, scale);
                         row_mean[static_cast<std::size_t>(r)] = static_cast<float>(sum / static_cast<double>(cols));
                       }
                     }
                   });
  // The decayed second-moment factors: state = state * beta2t + (1 - beta2t) * mean.
  double row_total = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    row[r] = row[r] * beta2t + one_minus_beta2t * row_mean[static_cast<std::size_t>(r)];
    row_total += row[r];
  }
  Factors f;
  auto& col_factor = f.col;
  col_factor.resize(static_cast<std::size_t>(cols));
  for (std::int64_t c = 0; c < cols; ++c) {
    double sum = 0.0;
    for (std::int64_t b = 0; b < blocks.count; ++b) sum += col_partial[static_cast<std::size_t>(b * cols + c)];
    col[c] = col[c] * beta2t + one_minus_beta2t * static_cast<float>(sum / static_cast<double>(rows));
    col_factor[static_cast<std::size_t>(c)] = 1.0f / std::sqrt(col[c]);  // col.rsqrt()
  }
  // HF _approx_sq_grad: (row / mean(row)).rsqrt() (x) col.rsqrt()
  const auto row_state_mean = static_cast<float>(row_total / static_cast<double>(rows));
  auto& row_factor = f.row;
  row_factor.resize(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    row_factor[static_cast<std::size_t>(r)] = 1.0f / std::sqrt(row[r] / row_state_mean);
  }
  return f;
}

}  // namespace

void fused_adafactor_matrix_step(at::Tensor& param, at::Tensor& grad, at::Tensor& row_state, at::Tensor& col_state,
                                 const AdafactorStepScalars& s) {
  TORCH_CHECK(param.dim() == 2, "fused Adafactor: the factored step takes a matrix, got ", param.sizes());
  check_same(grad, param, "grad");
  const std::int64_t rows = param.size(0);
  const std::int64_t cols = param.size(1);
  TORCH_CHECK(
      row_state.numel() == rows && col_state.numel() == cols && row_state.is_contiguous() && col_state.is_contiguous(),
      "fused Adafactor: state of ", row_state.sizes(), " and ", col_state.sizes(), " for a parameter of ",
      param.sizes());
  float* p = param.data_ptr<float>();
  float* g = grad.data_ptr<float>();
  float* row = row_state.data_ptr<float>();
  float* col = col_state.data_ptr<float>();
  const Blocks blocks = split_rows(rows);

  const auto factors = second_moment_factors(g, row, col, rows, cols, blocks, s);
  const auto& row_factor = factors.row;
  const auto& col_factor = factors.col;
  const auto scale = static_cast<float>(s.grad_scale);

  // Pass 2: the RMS of the update r_i c_j g_ij, for clipping.
  std::vector<double> sq_partial(static_cast<std::size_t>(blocks.count), 0.0);
  at::parallel_for(
      0, blocks.count, grain_for(blocks.count, blocks.size * cols, 1), [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t b = first; b < last; ++b) {
          double sum = 0.0;
          for (std::int64_t r = b * blocks.size; r < std::min(rows, (b + 1) * blocks.size); ++r) {
            sum +=
                update_squares(g + r * cols, col_factor.data(), cols, row_factor[static_cast<std::size_t>(r)], scale);
          }
          sq_partial[static_cast<std::size_t>(b)] = sum;
        }
      });
  double sum_sq = 0.0;
  for (const double part : sq_partial) sum_sq += part;
  const double rms = std::sqrt(sum_sq / static_cast<double>(rows * cols));
  RowUpdate update;
  update.divisor = static_cast<float>(std::max(1.0, rms / s.clip_threshold));
  update.lr = static_cast<float>(s.lr);
  update.neg_decay = static_cast<float>(-s.weight_decay * s.lr);
  update.scale = scale;
  update.decays = s.weight_decay != 0.0;
  update.zero = s.zero_grad;

  // Pass 3: p = p - lr * wd * p - lr * update / divisor
  at::parallel_for(0, rows, grain_for(rows, cols, std::max<std::int64_t>(1, (std::int64_t{1} << 16) / cols)),
                   [&](std::int64_t first, std::int64_t last) {
                     RowUpdate row = update;
                     for (std::int64_t r = first; r < last; ++r) {
                       row.row_factor = row_factor[static_cast<std::size_t>(r)];
                       update_row(p + r * cols, g + r * cols, col_factor.data(), cols, row);
                     }
                   });
}

void fused_adafactor_vector_step(at::Tensor& param, at::Tensor& grad, at::Tensor& state,
                                 const AdafactorStepScalars& s) {
  check_same(grad, param, "grad");
  check_same(state, param, "exp_avg_sq");
  float* p = param.data_ptr<float>();
  float* g = grad.data_ptr<float>();
  float* v = state.data_ptr<float>();
  const std::int64_t n = param.numel();
  const auto eps1 = static_cast<float>(s.eps1);
  const auto scale = static_cast<float>(s.grad_scale);
  const auto beta2t = static_cast<float>(s.beta2t);
  const auto one_minus_beta2t = static_cast<float>(1.0 - s.beta2t);
  double sum_sq = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * scale;
    v[i] = v[i] * beta2t + one_minus_beta2t * (gi * gi + eps1);
    const float u = 1.0f / std::sqrt(v[i]) * gi;
    sum_sq += static_cast<double>(u) * u;
  }
  const double rms = std::sqrt(sum_sq / static_cast<double>(n));
  const auto divisor = static_cast<float>(std::max(1.0, rms / s.clip_threshold));
  const auto lr = static_cast<float>(s.lr);
  const auto neg_decay = static_cast<float>(-s.weight_decay * s.lr);
  const bool decays = s.weight_decay != 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    float u = 1.0f / std::sqrt(v[i]) * (g[i] * scale);
    u = u / divisor;
    u = u * lr;
    float pi = p[i];
    if (decays) pi = pi + neg_decay * pi;
    p[i] = pi + (-u);
  }
  if (s.zero_grad) std::fill(g, g + n, 0.0f);
}

}  // namespace fitsum::optim
