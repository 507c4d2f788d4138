// Implements runtime_flags.h.
#include "runtime_flags.h"

#include <iostream>

namespace fitsum::cli {

void add_runtime_flags(CLI::App& g, util::RuntimeOptions& r) {
  g.add_option("--device", r.device, "cpu, cuda or auto")->capture_default_str();
  // Parsed once, while the flags are read: a setting LibTorch would reject fails before anything is loaded.
  g.add_option_function<std::string>(
      "--cuda_alloc_conf",
      [&r](const std::string& text) { r.cuda_alloc_conf = util::parse_cuda_alloc_conf(text, "--cuda_alloc_conf"); },
      "CUDA caching-allocator settings, e.g. expandable_segments:True (as PYTORCH_CUDA_ALLOC_CONF); the plan predicts "
      "reserved memory under them");
  g.add_option("--num_threads", r.threads.intra_op,
               "LibTorch intra-op threads (0: fitsum's default: 1 where the BLAS has threads of its own, else one per "
               "core)")
      ->capture_default_str();
  g.add_option("--blas_threads", r.threads.blas,
               "BLAS threads for matrix products (0: fitsum's default: one per core where the BLAS has threads of its "
               "own (OpenBLAS built with pthreads), else it runs on the intra-op threads)")
      ->capture_default_str();
}

util::Runtime start_runtime(const util::RuntimeOptions& options) {
  auto runtime = util::setup_runtime(options);
  for (const auto& warning : runtime.warnings) std::cerr << "fitsum: warning: " << warning << "\n";
  return runtime;
}

}  // namespace fitsum::cli
