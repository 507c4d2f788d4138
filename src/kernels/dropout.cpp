// Implements include/fitsum/kernels/dropout.h: a custom autograd Function that saves the uint8 keep-mask.
#include "fitsum/kernels/dropout.h"

#include <cstdint>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "fitsum/util/cpu_dispatch.h"

namespace fitsum::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The keys of one dropout call, from one 64-bit draw of LibTorch's generator.
struct MaskKeys {
  std::uint32_t offset;
  std::uint32_t mix;
};

// A counter-based generator: element i's 32-bit uniform is murmur3's finaliser (fmix32) of a Weyl sequence
// i * golden + offset, xor-ed with a second key. fmix32 is a bijection with full avalanche, so each call's
// uniforms are distinct, evenly spread and uncorrelated between neighbours; 32-bit arithmetic vectorises.
inline std::uint32_t uniform32(std::uint32_t i, MaskKeys k) {
  std::uint32_t h = (i * 0x9E3779B9u + k.offset) ^ k.mix;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

// Element i is kept when its uniform is at least `threshold` (= p * 2^32). The loops are compiled twice, for AVX2
// and for plain x86-64, and the loader picks the one the processor runs.
template <typename T>
FITSUM_TEMPLATE_CLONES void dropout_forward_kernel(const T* in, T* out, std::uint8_t* mask, std::int64_t n,
                                                   MaskKeys keys, std::uint32_t threshold, float scale) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t keep = uniform32(static_cast<std::uint32_t>(i), keys) >= threshold;
    mask[i] = keep;
    out[i] = static_cast<T>(static_cast<float>(in[i]) * (scale * static_cast<float>(keep)));
  }
}

FITSUM_CLONES void dropout_mask_kernel(std::uint8_t* mask, std::int64_t n, MaskKeys keys, std::uint32_t threshold) {
  for (std::int64_t i = 0; i < n; ++i) mask[i] = uniform32(static_cast<std::uint32_t>(i), keys) >= threshold;
}

template <typename T>
FITSUM_TEMPLATE_CLONES void dropout_backward_kernel(const T* grad, T* out, const std::uint8_t* mask, std::int64_t n,
                                                    float scale) {
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<T>(static_cast<float>(grad[i]) * (scale * static_cast<float>(mask[i])));
  }
}

MaskKeys draw_keys() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  const std::uint64_t bits = at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
  return {static_cast<std::uint32_t>(bits), static_cast<std::uint32_t>(bits >> 32)};
}

// Element i is kept when its uniform is at least this (p * 2^32): kept with probability 1 - p.
std::uint32_t keep_threshold(double p) { return static_cast<std::uint32_t>(p * 4294967296.0); }
float keep_scale(double p) { return static_cast<float>(1.0 / (1.0 - p)); }

class DropoutFunction : public torch::autograd::Function<DropoutFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, double p) {
    auto dropped = byte_mask_dropout(input, p);
    ctx->saved_data["mask"] = dropped.mask;
    ctx->saved_data["scale"] = static_cast<double>(dropped.scale);
    return dropped.output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto mask = ctx->saved_data["mask"].toTensor();
    const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    return {apply_byte_mask(grad_outputs[0], mask, scale), at::Tensor()};
  }
};

}  // namespace

ByteMaskDropout byte_mask_dropout(const at::Tensor& input, double p) {
  const auto x = input.contiguous();
  TORCH_CHECK(x.numel() < (std::int64_t{1} << 32), "dropout: at most 2^32 elements per tensor, got ", x.numel());
  ByteMaskDropout d;
  d.output = at::empty_like(x, at::MemoryFormat::Contiguous);
  d.mask = at::empty(x.sizes(), x.options().dtype(at::kByte));
  const auto threshold = keep_threshold(p);
  d.scale = keep_scale(p);
  const auto keys = draw_keys();
  if (x.scalar_type() == at::kFloat) {
    dropout_forward_kernel(x.data_ptr<float>(), d.output.data_ptr<float>(), d.mask.data_ptr<std::uint8_t>(), x.numel(),
                           keys, threshold, d.scale);
  } else {
    dropout_forward_kernel(x.data_ptr<at::BFloat16>(), d.output.data_ptr<at::BFloat16>(),
                           d.mask.data_ptr<std::uint8_t>(), x.numel(), keys, threshold, d.scale);
  }
  return d;
}

ByteMask draw_byte_mask(at::IntArrayRef sizes, double p) {
  ByteMask m;
  m.mask = at::empty(sizes, at::TensorOptions().dtype(at::kByte));
  TORCH_CHECK(m.mask.numel() < (std::int64_t{1} << 32), "dropout: at most 2^32 elements per tensor, got ",
              m.mask.numel());
  m.scale = keep_scale(p);
  dropout_mask_kernel(m.mask.data_ptr<std::uint8_t>(), m.mask.numel(), draw_keys(), keep_threshold(p));
  return m;
}

at::Tensor apply_byte_mask(const at::Tensor& x, const at::Tensor& mask, float scale) {
  const auto in = x.contiguous();
  TORCH_CHECK(in.numel() == mask.numel(), "apply_byte_mask: ", in.numel(), " elements, mask of ", mask.numel());
  auto out = at::empty_like(in, at::MemoryFormat::Contiguous);
  if (in.scalar_type() == at::kFloat) {
    dropout_backward_kernel(in.data_ptr<float>(), out.data_ptr<float>(), mask.data_ptr<std::uint8_t>(), in.numel(),
                            scale);
  } else {
    dropout_backward_kernel(in.data_ptr<at::BFloat16>(), out.data_ptr<at::BFloat16>(), mask.data_ptr<std::uint8_t>(),
                            in.numel(), scale);
  }
  return out;
}

at::Tensor& apply_byte_mask_(at::Tensor& x, const at::Tensor& mask, float scale) {
  TORCH_CHECK(x.is_contiguous(), "apply_byte_mask_: the tensor must be contiguous");
  TORCH_CHECK(x.numel() == mask.numel(), "apply_byte_mask_: ", x.numel(), " elements, mask of ", mask.numel());
  if (x.scalar_type() == at::kFloat) {
    dropout_backward_kernel(x.data_ptr<float>(), x.data_ptr<float>(), mask.data_ptr<std::uint8_t>(), x.numel(), scale);
  } else {
    dropout_backward_kernel(x.data_ptr<at::BFloat16>(), x.data_ptr<at::BFloat16>(), mask.data_ptr<std::uint8_t>(),
                            x.numel(), scale);
  }
  return x;
}

at::Tensor dropout(const at::Tensor& input, double p, bool training) {
  if (!training || p == 0.0 || input.numel() == 0) return input;
  const bool own_kernel = input.device().is_cpu() && p > 0.0 && p < 1.0 &&
                          (input.scalar_type() == at::kFloat || input.scalar_type() == at::kBFloat16);
  if (!own_kernel) return torch::dropout(input, p, training);
  return DropoutFunction::apply(input, p);
}

at::Tensor dropout_over(at::Tensor x, double p, bool training, bool byte_mask) {
  const bool unrecorded = !at::GradMode::is_enabled() || !x.requires_grad();
  const bool own_kernel = training && byte_mask && p > 0.0 && p < 1.0 && x.numel() > 0 && x.device().is_cpu() &&
                          (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) && x.is_contiguous();
  if (!(unrecorded && own_kernel)) return dropout(x, p, training, byte_mask);
  const auto drawn = draw_byte_mask(x.sizes(), p);
  return apply_byte_mask_(x, drawn.mask, drawn.scale);
}

at::Tensor dropout(const at::Tensor& input, double p, bool training, bool byte_mask) {
  return byte_mask ? kernels::dropout(input, p, training) : torch::dropout(input, p, training);
}

}  // namespace fitsum::kernels
