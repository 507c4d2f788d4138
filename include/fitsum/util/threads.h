// The two thread pools of a CPU training step: LibTorch's intra-op threads (element-wise ops, reductions,
// fitsum's fused kernels) and the BLAS library's own threads (every matrix product). On Debian's LibTorch the
// BLAS is whatever provides libblas.so.3 (OpenBLAS when installed), reached here through dlsym, so nothing links
// against a particular BLAS.
#pragma once

#include <cstdint>
#include <string>

namespace fitsum::util {

struct ThreadSettings {
  int intra_op = 0;  // at::set_num_threads; 0 leaves LibTorch's choice
  int blas = 0;      // openblas_set_num_threads; 0 leaves the BLAS library's choice
  int update = 0;    // intra-op threads during the optimizer step (memory-bound, no matrix products); 0: intra_op
};

// Sets LibTorch's intra-op threads for its scope (n > 0), and puts the previous count back.
class IntraOpThreadsGuard {
 public:
  explicit IntraOpThreadsGuard(int threads);
  ~IntraOpThreadsGuard();
  IntraOpThreadsGuard(const IntraOpThreadsGuard&) = delete;
  IntraOpThreadsGuard& operator=(const IntraOpThreadsGuard&) = delete;

 private:
  int previous_ = 0;
};

// What `fitsum train` and `fitsum bench` use unless told otherwise, chosen by measuring whole training steps
// (docs/performance.md): the BLAS library keeps one thread per core for the matrix products and LibTorch runs one
// intra-op thread. Two pools each as wide as the machine fight over the cores (the BLAS threads spin while
// LibTorch's wait), which made a step several times slower than either alone. The optimizer step runs no matrix
// product, but two intra-op threads there did not pay either: on a busy machine every parallel region waits for
// both threads to be scheduled.
ThreadSettings default_thread_settings();

// default_thread_settings(), with the non-zero fields of `requested` taking precedence.
// Throws std::invalid_argument for a count below 0 or above kMaxThreads (num_threads, blas_threads, update_threads).
ThreadSettings resolve_thread_settings(const ThreadSettings& requested);
inline constexpr int kMaxThreads = 1024;

// Applies the non-zero fields.
void apply_thread_settings(const ThreadSettings& settings);

// The BLAS library's thread count, or 0 when it offers no way to ask (not OpenBLAS).
int blas_threads();
// "OpenBLAS 0.3.21 ..." (its build configuration), or "unknown BLAS".
std::string blas_description();

// A quick fp32 matrix-product rate on the CPU (best of a few n x n x n products, a few milliseconds), in GFLOP/s:
// enough to tell an optimised BLAS (tens to hundreds) from Debian's reference one (about 5).
double quick_matmul_gflops(std::int64_t n = 256);

}  // namespace fitsum::util
