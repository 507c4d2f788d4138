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

// How the BLAS library that LibTorch calls for matrix products runs its threads.
enum class BlasThreading {
  own_pool,       // OpenBLAS built with pthreads (Debian's libopenblas0-pthread): threads of its own
  intra_op_pool,  // MKL (PyPI's LibTorch) or OpenBLAS built with OpenMP: LibTorch's intra-op (OpenMP) threads
  single,         // OpenBLAS built sequential: one thread, the caller's
  unknown,        // another BLAS (Debian's reference BLAS, ...)
};
// Asked of the library in the process (openblas_get_parallel), else read from LibTorch's build configuration.
BlasThreading blas_threading();

// What `fitsum train` and `fitsum bench` use unless told otherwise, chosen by measuring whole training steps
// (docs/performance.md). Where the BLAS has threads of its own, it keeps one per core for the matrix products and
// LibTorch runs one intra-op thread: two pools each as wide as the machine fight over the cores (the BLAS threads
// spin while LibTorch's wait), which made a step several times slower than either alone. Where the BLAS runs on
// LibTorch's intra-op threads (or on one thread), there is one pool: LibTorch gets one thread per core (with one,
// MKL's products ran on one core: 1.4x slower steps). The optimizer step runs no matrix product, and two intra-op
// threads there did not pay: on a busy machine every parallel region waits for both threads to be scheduled.
// `processes`: the processes of a job on this machine (a data-parallel job's LOCAL_WORLD_SIZE), which share its
// cores: "one per core" is then one per core of its share (at least one).
ThreadSettings default_thread_settings(int processes = 1);

// default_thread_settings(processes), with the non-zero fields of `requested` taking precedence.
// Throws std::invalid_argument for a count below 0 or above kMaxThreads (num_threads, blas_threads, update_threads).
ThreadSettings resolve_thread_settings(const ThreadSettings& requested, int processes = 1);
inline constexpr int kMaxThreads = 1024;

// Applies the non-zero fields.
void apply_thread_settings(const ThreadSettings& settings);

// The threads a matrix product runs on: OpenBLAS's own count, LibTorch's intra-op count where the BLAS runs on
// those threads, 1 for a sequential OpenBLAS, 0 for an unknown BLAS.
int blas_threads();
// "OpenBLAS 0.3.21 ..." (its build configuration), "Intel(R) oneAPI Math Kernel Library Version 2024.2-Product
// Build 20240605" (from LibTorch's build configuration), "BLAS_INFO=generic" (likewise), or "unknown BLAS".
std::string blas_description();

// A quick fp32 matrix-product rate on the CPU (best of a few n x n x n products, a few milliseconds), in GFLOP/s:
// enough to tell an optimised BLAS (tens to hundreds) from Debian's reference one (about 5).
double quick_matmul_gflops(std::int64_t n = 256);

// Whether a BLAS so described may be Debian's reference one: not OpenBLAS or MKL (a known optimised BLAS is slow
// only on a machine busy with other processes, where OpenBLAS's threads wait on each other) and measured at
// `gflops` under 20 GFLOP/s.
bool reference_blas_suspected(const std::string& description, double gflops);
bool optimised_blas(const std::string& description);

}  // namespace fitsum::util
