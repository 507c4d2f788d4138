// Implements include/fitsum/model/dropout.h: a custom autograd Function that saves the uint8 keep-mask.
#include "fitsum/model/dropout.h"

#include <cstdint>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

namespace fitsum::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr std::int64_t kGrain = std::int64_t{1} << 15;  // elements per task; even, so pairs never straddle tasks

// splitmix64 (Steele, Lea, Flood 2014): a bijective 64-bit mix; applied to seed + counter it is a fine
// counter-based generator for masks.
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Element i is kept when its 32-bit uniform (one half of splitmix64(seed + i / 2)) is at least `threshold`.
template <typename T>
void dropout_forward_kernel(const T* in, T* out, std::uint8_t* mask, std::int64_t n, std::uint64_t seed,
                            std::uint32_t threshold, float scale) {
  at::parallel_for(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::uint64_t bits = splitmix64(seed + static_cast<std::uint64_t>(i >> 1));
      const auto uniform = static_cast<std::uint32_t>((i & 1) ? bits >> 32 : bits);
      const bool keep = uniform >= threshold;
      mask[i] = keep;
      out[i] = keep ? static_cast<T>(static_cast<float>(in[i]) * scale) : static_cast<T>(0.0f);
    }
  });
}

template <typename T>
void dropout_backward_kernel(const T* grad, T* out, const std::uint8_t* mask, std::int64_t n, float scale) {
  at::parallel_for(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      out[i] = mask[i] ? static_cast<T>(static_cast<float>(grad[i]) * scale) : static_cast<T>(0.0f);
    }
  });
}

std::uint64_t draw_seed() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
}

class DropoutFunction : public torch::autograd::Function<DropoutFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, double p) {
    const auto x = input.contiguous();
    auto out = at::empty_like(x, at::MemoryFormat::Contiguous);
    auto mask = at::empty(x.sizes(), x.options().dtype(at::kByte));
    // keep with probability 1 - p: uniform in [0, 2^32) at least p * 2^32
    const auto threshold = static_cast<std::uint32_t>(p * 4294967296.0);
    const auto scale = static_cast<float>(1.0 / (1.0 - p));
    const auto seed = draw_seed();
    if (x.scalar_type() == at::kFloat) {
      dropout_forward_kernel(x.data_ptr<float>(), out.data_ptr<float>(), mask.data_ptr<std::uint8_t>(), x.numel(),
                             seed, threshold, scale);
    } else {
      dropout_forward_kernel(x.data_ptr<at::BFloat16>(), out.data_ptr<at::BFloat16>(),
                             mask.data_ptr<std::uint8_t>(), x.numel(), seed, threshold, scale);
    }
    ctx->saved_data["mask"] = mask;
    ctx->saved_data["scale"] = static_cast<double>(scale);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto mask = ctx->saved_data["mask"].toTensor();
    const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    const auto grad = grad_outputs[0].contiguous();
    auto grad_input = at::empty_like(grad, at::MemoryFormat::Contiguous);
    if (grad.scalar_type() == at::kFloat) {
      dropout_backward_kernel(grad.data_ptr<float>(), grad_input.data_ptr<float>(), mask.data_ptr<std::uint8_t>(),
                              grad.numel(), scale);
    } else {
      dropout_backward_kernel(grad.data_ptr<at::BFloat16>(), grad_input.data_ptr<at::BFloat16>(),
                              mask.data_ptr<std::uint8_t>(), grad.numel(), scale);
    }
    return {grad_input, at::Tensor()};
  }
};

}  // namespace

at::Tensor dropout(const at::Tensor& input, double p, bool training) {
  if (!training || p == 0.0 || input.numel() == 0) return input;
  const bool own_kernel = input.device().is_cpu() && p > 0.0 && p < 1.0 &&
                          (input.scalar_type() == at::kFloat || input.scalar_type() == at::kBFloat16);
  if (!own_kernel) return torch::dropout(input, p, training);
  return DropoutFunction::apply(input, p);
}

}  // namespace fitsum::model
