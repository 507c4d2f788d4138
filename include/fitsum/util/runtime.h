// The process setup every command that runs a model shares (train, plan, bench, eval, summarize): the device, the
// two thread pools (util/threads.h), the C allocator's tuning for training (util/host_allocator.h) and the CUDA
// caching allocator's settings. One setup, so that the speeds the planner measures in `fitsum plan` are the speeds
// `fitsum train` runs at.
#pragma once

#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "fitsum/util/threads.h"

namespace fitsum::util {

struct RuntimeOptions {
  std::string device = "auto";  // cpu, cuda or auto
  ThreadSettings threads;       // zero fields: fitsum's defaults (default_thread_settings)
  bool tune_host_allocator = true;
  std::string cuda_alloc_conf;  // PYTORCH_CUDA_ALLOC_CONF, set before CUDA initialises
};

struct Runtime {
  c10::Device device = c10::Device(c10::kCPU);
  ThreadSettings threads;             // as applied
  std::vector<std::string> warnings;  // e.g. a reference BLAS that makes matrix products ~35x slower
};

// "cpu", "cuda" or "auto" (CUDA when a device is visible); throws std::invalid_argument naming `device`.
c10::Device resolve_device(const std::string& name);

// Applies the options to the process; call once, before the model is built.
Runtime setup_runtime(const RuntimeOptions& options);

}  // namespace fitsum::util
