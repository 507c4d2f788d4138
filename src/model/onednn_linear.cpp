#include "fitsum/model/onednn_linear.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>

#ifdef FITSUM_WITH_ONEDNN
#include <dnnl.h>
#include <omp.h>
#endif

#include "fitsum/util/torch_compat.h"

namespace fitsum::model {

namespace {

bool is_cpu_float(const at::Tensor& t) {
  return t.device().is_cpu() && t.layout() == at::kStrided && t.scalar_type() == at::kFloat;
}

#ifdef FITSUM_WITH_ONEDNN
// oneDNN's own reading of the processor (with ONEDNN_MAX_CPU_ISA applied), once.
bool uses_avx512() {
  static const bool uses = [] {
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

bool graph_free_float_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!is_cpu_float(x) || !is_cpu_float(weight) || x.dim() < 1 || weight.dim() != 2) return false;
  if (x.size(-1) != weight.size(1) || !weight.is_contiguous()) return false;
  if (bias.defined() &&
      (!is_cpu_float(bias) || bias.dim() != 1 || bias.size(0) != weight.size(0) || !bias.is_contiguous())) {
    return false;
  }
  if (util::autocast_enabled(c10::DeviceType::CPU)) return false;
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

at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int threads) {
  if (!onednn_linear_applies(x, weight, bias)) {
    throw std::invalid_argument("onednn_linear: inputs it does not apply to (see onednn_linear_applies)");
  }
#ifdef FITSUM_WITH_ONEDNN
  RECORD_FUNCTION("fitsum::onednn_linear", std::vector<c10::IValue>{});
  const auto k = weight.size(1);
  const auto n = weight.size(0);
  const auto input = x.contiguous();
  auto sizes = input.sizes().vec();
  sizes.back() = n;
  std::int64_t m = 1;
  for (std::size_t d = 0; d + 1 < sizes.size(); ++d) m *= sizes[d];
  // As LibTorch's addmm: the bias broadcast into the output, then the product added to it (beta 1).
  auto y = bias.defined() ? bias.expand(sizes).contiguous() : at::empty(sizes, input.options());
  if (m == 0 || n == 0) return y;
  if (k == 0) return bias.defined() ? y : y.zero_();
  OmpThreads scope(std::max(threads, 1));
  // Row-major: y (m, n) = x (m, k) weight^T + beta y.
  const auto status = dnnl_sgemm('N', 'T', m, n, k, 1.0f, input.data_ptr<float>(), k, weight.data_ptr<float>(), k,
                                 bias.defined() ? 1.0f : 0.0f, y.data_ptr<float>(), n);
  if (status != dnnl_success) {
    throw std::runtime_error("onednn_linear: oneDNN's sgemm failed (status " + std::to_string(status) + ") for (" +
                             std::to_string(m) + " x " + std::to_string(k) + ") x (" + std::to_string(k) + " x " +
                             std::to_string(n) + ")");
  }
  return y;
#else
  (void)threads;
  return at::Tensor();
#endif
}

namespace {

// Whether t's last two dimensions are row-major (`transposed` false) or a transpose(-1, -2) of row-major, with the
// matrices of the leading dimensions one after the other.
bool matrices_in_order(const at::Tensor& t, bool& transposed) {
  const auto dims = t.dim();
  const auto rows = t.size(dims - 2);
  const auto cols = t.size(dims - 1);
  if (t.is_contiguous()) {
    transposed = false;
    return true;
  }
  // A transposed view: unit stride along the rows, `rows` along the columns, and the leading dimensions dense.
  if (t.stride(dims - 2) != 1 || t.stride(dims - 1) != rows) return false;
  std::int64_t expected = rows * cols;
  for (auto d = dims - 3; d >= 0; --d) {
    if (t.size(d) != 1 && t.stride(d) != expected) return false;
    expected *= t.size(d);
  }
  transposed = true;
  return true;
}

}  // namespace

bool onednn_matmul_applies(const at::Tensor& a, const at::Tensor& b) {
#ifdef FITSUM_WITH_ONEDNN
  if (!uses_avx512()) return false;
  if (!is_cpu_float(a) || !is_cpu_float(b) || a.dim() < 3 || b.dim() != a.dim()) return false;
  for (std::int64_t d = 0; d + 2 < a.dim(); ++d) {
    if (a.size(d) != b.size(d)) return false;
  }
  if (a.size(-1) != b.size(-2)) return false;
  if (util::autocast_enabled(c10::DeviceType::CPU)) return false;
  return !(at::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad()));
#else
  (void)a, (void)b;
  return false;
#endif
}

at::Tensor onednn_matmul(const at::Tensor& a, const at::Tensor& b, int threads) {
  if (!onednn_matmul_applies(a, b)) {
    throw std::invalid_argument("onednn_matmul: inputs it does not apply to (see onednn_matmul_applies)");
  }
#ifdef FITSUM_WITH_ONEDNN
  RECORD_FUNCTION("fitsum::onednn_matmul", std::vector<c10::IValue>{});
  const auto left = a.contiguous();
  // b's matrices row-major, or transposed of row-major (attention's key^T), copied into one of the two if they are
  // neither (as LibTorch's bmm copies them): the copy keeps the inner dimension's unit stride where it has it.
  bool transposed = false;
  at::Tensor right = b;
  if (!matrices_in_order(b, transposed)) {
    transposed = b.stride(-2) == 1;
    right = transposed ? b.transpose(-1, -2).contiguous().transpose(-1, -2) : b.contiguous();
  }
  const auto m = a.size(-2);
  const auto k = a.size(-1);
  const auto n = b.size(-1);
  auto sizes = a.sizes().vec();
  sizes.back() = n;
  auto y = at::empty(sizes, a.options());
  const auto items = m == 0 || n == 0 ? 0 : y.numel() / (m * n);
  if (items == 0) return y;
  if (k == 0) return y.zero_();
  const float* ap = left.data_ptr<float>();
  const float* bp = right.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const auto team = static_cast<int>(
      std::min<std::int64_t>({std::max(threads, 1), items, std::max<std::int64_t>(1, (items * m * n * k) >> 19)}));
  dnnl_status_t failed = dnnl_success;
  // Nested in the region, each sgemm runs on its own thread (oneDNN runs serially inside a parallel region).
#pragma omp parallel for num_threads(team) schedule(static)
  for (std::int64_t i = 0; i < items; ++i) {
    const auto status = dnnl_sgemm('N', transposed ? 'T' : 'N', m, n, k, 1.0f, ap + i * m * k, k, bp + i * k * n,
                                   transposed ? k : n, 0.0f, yp + i * m * n, n);
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
  (void)threads;
  return at::Tensor();
#endif
}

}  // namespace fitsum::model
