// The runtime flags shared by every command that runs a model (train, plan, eval, summarize): the device and the
// two thread pools, filling util::RuntimeOptions (util/runtime.h).
#pragma once

#include <CLI/CLI.hpp>

#include "fitsum/util/runtime.h"

namespace fitsum::cli {

// --device, --cuda_alloc_conf, --num_threads, --blas_threads
void add_runtime_flags(CLI::App& command, util::RuntimeOptions& options);

// Sets the process up (util::setup_runtime) and prints its warnings to stderr.
util::Runtime start_runtime(const util::RuntimeOptions& options);

}  // namespace fitsum::cli
