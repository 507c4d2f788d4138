// Small helpers that hide the API differences between Debian's LibTorch 1.13 and the LibTorch of PyTorch 2.x.
// Everything version-dependent goes through here, so the rest of the code compiles unchanged on both.
#pragma once

#include <torch/version.h>

#define FITSUM_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// at::scaled_dot_product_attention with a `scale` argument (fused flash / memory-efficient kernels) since 2.1.
#define FITSUM_HAS_SDPA FITSUM_TORCH_AT_LEAST(2, 1)
