// Implements include/fitsum/util/threads.h.
#include "fitsum/util/threads.h"

#include <dlfcn.h>

#include <thread>

#include <ATen/Parallel.h>

namespace fitsum::util {

namespace {

// OpenBLAS's C entry points, looked up in the process (libblas.so.3 is already loaded by LibTorch).
template <typename Fn>
Fn openblas_symbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, name));
}

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace

ThreadSettings default_thread_settings() {
  ThreadSettings s;
  s.intra_op = 1;
  s.blas = hardware_threads();
  s.update = 1;
  return s;
}

ThreadSettings resolve_thread_settings(const ThreadSettings& requested) {
  auto s = default_thread_settings();
  if (requested.intra_op > 0) s.intra_op = requested.intra_op;
  if (requested.blas > 0) s.blas = requested.blas;
  if (requested.update > 0) s.update = requested.update;
  return s;
}

void apply_thread_settings(const ThreadSettings& settings) {
  if (settings.intra_op > 0) at::set_num_threads(settings.intra_op);
  if (settings.blas > 0) {
    if (auto set = openblas_symbol<void (*)(int)>("openblas_set_num_threads")) set(settings.blas);
  }
}

IntraOpThreadsGuard::IntraOpThreadsGuard(int threads) : previous_(at::get_num_threads()) {
  if (threads > 0 && threads != previous_) at::set_num_threads(threads);
}

IntraOpThreadsGuard::~IntraOpThreadsGuard() {
  if (at::get_num_threads() != previous_) at::set_num_threads(previous_);
}

int blas_threads() {
  if (auto get = openblas_symbol<int (*)()>("openblas_get_num_threads")) return get();
  return 0;
}

std::string blas_description() {
  if (auto config = openblas_symbol<char* (*)()>("openblas_get_config")) return config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  return "unknown BLAS";
}

}  // namespace fitsum::util
