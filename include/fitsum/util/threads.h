// The two thread pools of a CPU training step: LibTorch's intra-op threads (element-wise ops, reductions,
// fitsum's fused kernels) and the BLAS library's own threads (every matrix product). On Debian's LibTorch the
// BLAS is whatever provides libblas.so.3 (OpenBLAS when installed), reached here through dlsym, so nothing links
// against a particular BLAS.
#pragma once

#include <string>

namespace fitsum::util {

struct ThreadSettings {
  int intra_op = 0;  // at::set_num_threads; 0 leaves LibTorch's choice
  int blas = 0;      // openblas_set_num_threads; 0 leaves the BLAS library's choice
};

// What `fitsum train` and `fitsum bench` use unless told otherwise, chosen by measuring whole training steps
// (docs/performance.md): the BLAS library keeps one thread per core for the matrix products and LibTorch runs one
// intra-op thread. Two pools each as wide as the machine fight over the cores (the BLAS threads spin while
// LibTorch's wait), which made a step slower than either alone.
ThreadSettings default_thread_settings();

// Applies the non-zero fields.
void apply_thread_settings(const ThreadSettings& settings);

// The BLAS library's thread count, or 0 when it offers no way to ask (not OpenBLAS).
int blas_threads();
// "OpenBLAS 0.3.21 ..." (its build configuration), or "unknown BLAS".
std::string blas_description();

}  // namespace fitsum::util
