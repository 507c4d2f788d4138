// Implements runtime_flags.h.
#include "runtime_flags.h"

#include <iostream>

namespace fitsum::cli {

void add_runtime_flags(CLI::App& g, util::RuntimeOptions& r) {
  g.add_option("--device", r.device, "cpu, cuda or auto")->capture_default_str();
  g.add_option("--cuda_alloc_conf", r.cuda_alloc_conf,
               "CUDA caching-allocator settings, e.g. expandable_segments:True (as PYTORCH_CUDA_ALLOC_CONF)");
  g.add_option("--num_threads", r.threads.intra_op, "LibTorch intra-op threads (0: fitsum's default, 1)")
      ->capture_default_str();
  g.add_option("--blas_threads", r.threads.blas, "BLAS threads for matrix products (0: fitsum's default, one per core)")
      ->capture_default_str();
}

util::Runtime start_runtime(const util::RuntimeOptions& options) {
  auto runtime = util::setup_runtime(options);
  for (const auto& warning : runtime.warnings) std::cerr << "fitsum: warning: " << warning << "\n";
  return runtime;
}

}  // namespace fitsum::cli
