#include "fitsum/kernels/onednn_linear.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <torch/autograd.h>
#include <torch/nn/functional/linear.h>
#include <torch/torch.h>

#ifdef FITSUM_WITH_ONEDNN
#include <dnnl.h>
#include <omp.h>
#endif

#include "fitsum/util/threads.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::kernels {

namespace {

bool is_cpu_float(const at::Tensor& t) {
  return t.device().is_cpu() && t.layout() == at::kStrided && t.scalar_type() == at::kFloat;
}

// The rows of x (..., K) as a matrix: the product of its leading sizes (not numel / K, which fails for K = 0).
std::int64_t rows_of(const at::Tensor& x) {
  std::int64_t rows = 1;
  for (std::int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  return rows;
}

#ifdef FITSUM_WITH_ONEDNN
// oneDNN's own reading of the processor (with ONEDNN_MAX_CPU_ISA applied), once; FITSUM_ONEDNN=0 in the
// environment turns fitsum's oneDNN products off (LibTorch's everywhere, as on a processor without AVX-512).
bool uses_avx512() {
  static const bool uses = [] {
    const char* setting = std::getenv("FITSUM_ONEDNN");
    if (setting != nullptr && std::string(setting) == "0") return false;
    const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const auto avx512 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core);
    return (isa & avx512) == avx512;
  }();
  return uses;
}

// omp_set_num_threads for the calling thread until the end of the scope (oneDNN's sgemm runs on as many threads as
// omp_get_max_threads() says; LibTorch sets that to its intra-op thread count, which fitsum keeps at one).
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OmpThreads() { omp_set_num_threads(saved_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};
#endif

}  // namespace

bool onednn_available() {
#ifdef FITSUM_WITH_ONEDNN
  return uses_avx512();
#else
  return false;
#endif
}

int product_threads(std::int64_t fmas) {
  const std::int64_t wanted = std::max({1, at::get_num_threads(), util::blas_threads()});
  return static_cast<int>(std::min(wanted, std::max<std::int64_t>(1, fmas >> 19)));
}

namespace {

// A 2-D float32 CPU matrix as sgemm reads it: row-major ('N', leading dimension stride(0)) or the transpose of a
// row-major one ('T', leading dimension stride(1)); false for other layouts.
bool gemm_operand(const at::Tensor& t, char& trans, std::int64_t& ld) {
  if (!is_cpu_float(t) || t.dim() != 2) return false;
  if (t.stride(1) == 1 && t.stride(0) >= std::max<std::int64_t>(t.size(1), 1)) {
    trans = 'N';
    ld = t.stride(0);
    return true;
  }
  if (t.stride(0) == 1 && t.stride(1) >= std::max<std::int64_t>(t.size(0), 1)) {
    trans = 'T';
    ld = t.stride(1);
    return true;
  }
  return false;
}

}  // namespace

bool onednn_gemm(const at::Tensor& c, const at::Tensor& a, const at::Tensor& b, float beta) {
#ifdef FITSUM_WITH_ONEDNN
  if (!uses_avx512() || util::autocast_enabled(c10::DeviceType::CPU)) return false;
  char ta = 'N', tb = 'N', tc = 'N';
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  if (!gemm_operand(a, ta, lda) || !gemm_operand(b, tb, ldb) || !gemm_operand(c, tc, ldc) || tc != 'N') return false;
  const auto m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK(b.size(0) == k && c.size(0) == m && c.size(1) == n, "onednn_gemm: (", m, " x ", k, ") x (", b.size(0),
              " x ", n, ") into (", c.size(0), " x ", c.size(1), ")");
  if (m == 0 || n == 0) return true;
  if (k == 0) {
    if (beta == 0.0f) c.zero_();
    return true;
  }
  RECORD_FUNCTION("fitsum::onednn_gemm", std::vector<c10::IValue>{});
  OmpThreads scope(product_threads(m * n * k));
  const auto status = dnnl_sgemm(ta, tb, m, n, k, 1.0f, a.data_ptr<float>(), lda, b.data_ptr<float>(), ldb, beta,
                                 c.data_ptr<float>(), ldc);
  TORCH_CHECK(status == dnnl_success, "oneDNN's sgemm failed (status ", static_cast<int>(status), ") for (", m, " x ",
              k, ") x (", k, " x ", n, ")");
  return true;
#else
  (void)c, (void)a, (void)b, (void)beta;
  return false;
#endif
}

at::Tensor dense_mm(const at::Tensor& a, const at::Tensor& b) {
  if (onednn_available() && is_cpu_float(a) && is_cpu_float(b) && a.dim() == 2 && b.dim() == 2) {
    const auto c = at::empty({a.size(0), b.size(1)}, a.options());
    if (onednn_gemm(c, a, b, 0.0f)) return c;
  }
  return at::mm(a, b);
}

void dense_addmm_(const at::Tensor& c, const at::Tensor& a, const at::Tensor& b) {
  if (!onednn_gemm(c, a, b, 1.0f)) c.addmm_(a, b);
}

at::Tensor dense_addmm(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b) {
  if (onednn_available() && is_cpu_float(bias) && is_cpu_float(a) && is_cpu_float(b) && a.dim() == 2 && b.dim() == 2) {
    const auto c = bias.expand({a.size(0), b.size(1)}).contiguous();
    if (onednn_gemm(c, a, b, 1.0f)) return c;
  }
  return at::addmm(bias, a, b);
}

namespace {

// x (..., K), weight (N, K) contiguous, bias (N) contiguous or undefined, all dense float32 on the CPU, outside CPU
// autocast: what every product path of this file and few_rows_linear.h's kernel takes, graph or not.
bool float_linear_operands(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!is_cpu_float(x) || !is_cpu_float(weight) || x.dim() < 1 || weight.dim() != 2) return false;
  if (x.size(-1) != weight.size(1) || !weight.is_contiguous()) return false;
  if (bias.defined() &&
      (!is_cpu_float(bias) || bias.dim() != 1 || bias.size(0) != weight.size(0) || !bias.is_contiguous())) {
    return false;
  }
  return !util::autocast_enabled(c10::DeviceType::CPU);
}

// a (..., M, K) and b (..., K, N) dense float32 on the CPU with the same leading dimensions (at least one, none
// broadcast), outside CPU autocast.
bool float_batched_operands(const at::Tensor& a, const at::Tensor& b) {
  if (!is_cpu_float(a) || !is_cpu_float(b) || a.dim() < 3 || b.dim() != a.dim()) return false;
  if (!std::equal(a.sizes().begin(), a.sizes().end() - 2, b.sizes().begin()) || a.size(-1) != b.size(-2)) return false;
  return !util::autocast_enabled(c10::DeviceType::CPU);
}

// x W^T + b as one matrix product (the bias broadcast into the output first, as LibTorch's addmm) -> (..., N).
at::Tensor linear_product(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  const auto x2 = x.reshape({rows_of(x), weight.size(1)});
  const auto y = bias.defined() ? dense_addmm(bias, x2, weight.t()) : dense_mm(x2, weight.t());
  return y.view(sizes);
}

}  // namespace

bool graph_free_float_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!float_linear_operands(x, weight, bias)) return false;
  const bool records = at::GradMode::is_enabled() &&
                       (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  return !records;
}

bool onednn_linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
#ifdef FITSUM_WITH_ONEDNN
  return uses_avx512() && graph_free_float_linear(x, weight, bias);
#else
  (void)x, (void)weight, (void)bias;
  return false;
#endif
}

at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!onednn_linear_applies(x, weight, bias)) {
    throw std::invalid_argument("onednn_linear: inputs it does not apply to (see onednn_linear_applies)");
  }
  RECORD_FUNCTION("fitsum::onednn_linear", std::vector<c10::IValue>{});
  return linear_product(x, weight, bias);
}

namespace {

// One operand of a batched product as sgemm reads it: its matrices row-major ('N') or transposed rows ('T'), each at
// its own offset from the first (any strides between the matrices), or a contiguous copy where neither fits.
struct MatrixOperand {
  at::Tensor tensor;  // the operand or its copy (kept alive)
  char trans = 'N';
  std::int64_t ld = 0;
  std::vector<std::int64_t> sizes, strides;  // of the leading dimensions

  static MatrixOperand of(const at::Tensor& t) {
    MatrixOperand o;
    const auto dims = t.dim();
    const auto rows = t.size(dims - 2);
    const auto cols = t.size(dims - 1);
    if (t.stride(dims - 1) == 1 && t.stride(dims - 2) >= std::max<std::int64_t>(cols, 1)) {
      o.tensor = t;
      o.ld = t.stride(dims - 2);
    } else if (t.stride(dims - 2) == 1 && t.stride(dims - 1) >= std::max<std::int64_t>(rows, 1)) {
      o.tensor = t;
      o.trans = 'T';
      o.ld = t.stride(dims - 1);
    } else {
      o.tensor = t.contiguous();
      o.ld = cols;
    }
    for (std::int64_t d = 0; d + 2 < dims; ++d) {
      o.sizes.push_back(o.tensor.size(d));
      o.strides.push_back(o.tensor.stride(d));
    }
    return o;
  }

  // The first element of matrix i (row-major order over the leading dimensions).
  const float* at(std::int64_t i) const {
    std::int64_t offset = 0;
    for (auto d = static_cast<std::int64_t>(sizes.size()) - 1; d >= 0; --d) {
      offset += (i % sizes[d]) * strides[d];
      i /= sizes[d];
    }
    return tensor.data_ptr<float>() + offset;
  }
};

}  // namespace

bool onednn_matmul_applies(const at::Tensor& a, const at::Tensor& b) {
#ifdef FITSUM_WITH_ONEDNN
  if (!uses_avx512() || !float_batched_operands(a, b)) return false;
  return !(at::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad()));
#else
  (void)a, (void)b;
  return false;
#endif
}

at::Tensor onednn_matmul(const at::Tensor& a, const at::Tensor& b) {
  if (!onednn_matmul_applies(a, b)) {
    throw std::invalid_argument("onednn_matmul: inputs it does not apply to (see onednn_matmul_applies)");
  }
#ifdef FITSUM_WITH_ONEDNN
  RECORD_FUNCTION("fitsum::onednn_matmul", std::vector<c10::IValue>{});
  const auto m = a.size(-2);
  const auto k = a.size(-1);
  const auto n = b.size(-1);
  auto sizes = a.sizes().vec();
  sizes.back() = n;
  auto y = at::empty(sizes, a.options());
  const auto items = m == 0 || n == 0 ? 0 : y.numel() / (m * n);
  if (items == 0) return y;
  if (k == 0) return y.zero_();
  // Each operand's matrices read in place where sgemm can (row-major or transposed rows, any strides between the
  // matrices: attention's heads are views into (B, T, H, hd) tensors), else copied as LibTorch's bmm copies them.
  const auto left = MatrixOperand::of(a);
  const auto right = MatrixOperand::of(b);
  float* yp = y.data_ptr<float>();
  const auto team = static_cast<int>(std::min<std::int64_t>(product_threads(items * m * n * k), items));
  dnnl_status_t failed = dnnl_success;
  // Nested in the region, each sgemm runs on its own thread (oneDNN runs serially inside a parallel region).
#pragma omp parallel for num_threads(team) schedule(static)
  for (std::int64_t i = 0; i < items; ++i) {
    const auto status = dnnl_sgemm(left.trans, right.trans, m, n, k, 1.0f, left.at(i), left.ld, right.at(i), right.ld,
                                   0.0f, yp + i * m * n, n);
    if (status != dnnl_success) {
#pragma omp critical
      failed = status;
    }
  }
  if (failed != dnnl_success) {
    throw std::runtime_error("onednn_matmul: oneDNN's sgemm failed (status " + std::to_string(failed) + ") for " +
                             std::to_string(items) + " products of (" + std::to_string(m) + " x " + std::to_string(k) +
                             ") x (" + std::to_string(k) + " x " + std::to_string(n) + ")");
  }
  return y;
#else
  return at::Tensor();
#endif
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x W^T + b with its backward's two products as dense_mm's (the same products LibTorch's mm backward computes:
// grad W = grad^T x, grad x = grad W). An empty bias stands for none: apply() takes no undefined input.
class DenseLinearFunction : public torch::autograd::Function<DenseLinearFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
    // x serves only the weight's gradient: a frozen weight (a LoRA base) does not keep its input alive.
    ctx->save_for_backward({weight.requires_grad() ? x : at::Tensor(), weight});
    ctx->saved_data["rows"] = rows_of(x);
    ctx->saved_data["sizes"] = x.sizes().vec();
    const bool has_bias = bias.numel() > 0;
    ctx->saved_data["bias"] = has_bias;
    return linear_product(x, weight, has_bias ? bias : at::Tensor());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    const auto n = weight.size(0);
    const auto k = weight.size(1);
    const auto rows = ctx->saved_data["rows"].toInt();
    const auto grad = grad_outputs[0].reshape({rows, n});
    at::Tensor grad_x, grad_weight, grad_bias;
    if (ctx->needs_input_grad(0)) grad_x = dense_mm(grad, weight).view(ctx->saved_data["sizes"].toIntVector());
    if (ctx->needs_input_grad(1)) grad_weight = dense_mm(grad.t(), x.reshape({rows, k}));
    if (ctx->needs_input_grad(2) && ctx->saved_data["bias"].toBool()) grad_bias = grad.sum(0);
    return {grad_x, grad_weight, grad_bias};
  }
};

// a b over the leading dimensions, its backward's products as onednn_matmul's: grad a = grad b^T, grad b = a^T grad.
class DenseMatmulFunction : public torch::autograd::Function<DenseMatmulFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    return onednn_matmul(a, b);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& a = saved[0];
    const auto& b = saved[1];
    const auto& grad = grad_outputs[0];
    at::Tensor grad_a, grad_b;
    if (ctx->needs_input_grad(0)) grad_a = onednn_matmul(grad, b.transpose(-1, -2));
    if (ctx->needs_input_grad(1)) grad_b = onednn_matmul(a.transpose(-1, -2), grad);
    return {grad_a, grad_b};
  }
};

// x W^T + b for a frozen bfloat16 W: only x's gradient, from a float32 copy of W made again in backward.
class FrozenBfloat16LinearFunction : public torch::autograd::Function<FrozenBfloat16LinearFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
    ctx->save_for_backward({weight});
    ctx->saved_data["rows"] = rows_of(x);
    ctx->saved_data["sizes"] = x.sizes().vec();
    return dense_linear(x, weight.to(at::kFloat), bias.numel() > 0 ? bias : at::Tensor());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto weight = ctx->get_saved_variables()[0].to(at::kFloat);
    const auto rows = ctx->saved_data["rows"].toInt();
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const auto grad = grad_outputs[0].reshape({rows, weight.size(0)});
    return {dense_mm(grad, weight).view(sizes), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor frozen_bfloat16_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                  bool training) {
  TORCH_CHECK(!weight.requires_grad(), "frozen_bfloat16_linear: the bfloat16 weight must be frozen");
  if (util::autocast_enabled(c10::DeviceType::CPU)) return torch::nn::functional::linear(x, weight, bias);
  if (!training || !at::GradMode::is_enabled() || !(x.requires_grad() || (bias.defined() && bias.requires_grad()))) {
    const auto w = weight.to(at::kFloat);  // frozen: the copy records nothing
    return training ? dense_linear(x, w, bias) : torch::nn::functional::linear(x, w, bias);
  }
  if (bias.defined() && bias.requires_grad()) {
    // A trainable bias (LoRA's bias = all / lora_only) adds outside the node, which then needs no bias gradient.
    return FrozenBfloat16LinearFunction::apply(x, weight, at::empty({0}, x.options())) + bias;
  }
  return FrozenBfloat16LinearFunction::apply(x, weight, bias.defined() ? bias : at::empty({0}, x.options()));
}

at::Tensor dense_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!onednn_available() || !float_linear_operands(x, weight, bias)) {
    return torch::nn::functional::linear(x, weight, bias);
  }
  return DenseLinearFunction::apply(x, weight, bias.defined() ? bias : at::empty({0}, weight.options()));
}

at::Tensor dense_matmul(const at::Tensor& a, const at::Tensor& b) {
  if (!onednn_available() || !float_batched_operands(a, b)) return torch::matmul(a, b);
  return DenseMatmulFunction::apply(a, b);
}

}  // namespace fitsum::kernels
