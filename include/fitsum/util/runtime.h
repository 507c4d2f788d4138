// The process setup every command that runs a model shares (train, plan, bench, eval, summarize): the device, the
// two thread pools (util/threads.h), the C allocator's tuning for training (util/host_allocator.h) and the CUDA
// caching allocator's settings. One setup, so that the speeds the planner measures in `fitsum plan` are the speeds
// `fitsum train` runs at.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "fitsum/util/cuda_alloc_conf.h"
#include "fitsum/util/threads.h"

namespace fitsum::util {

struct RuntimeOptions {
  std::string device = "auto";  // cpu, cuda or auto
  // The process's place on its machine in a data-parallel job (LOCAL_RANK; 0 alone): its CUDA device's index.
  int local_rank = 0;
  // The job's processes on this machine (LOCAL_WORLD_SIZE and its kin; 1 alone): they share its cores.
  int local_processes = 1;
  ThreadSettings threads;  // zero fields: fitsum's defaults (default_thread_settings for local_processes)
  bool tune_host_allocator = true;
  // The CUDA caching allocator's settings (parsed from --cuda_alloc_conf); set as PYTORCH_CUDA_ALLOC_CONF before
  // CUDA initialises. Empty: PYTORCH_CUDA_ALLOC_CONF from the environment, checked the same way, if any.
  std::optional<CudaAllocConf> cuda_alloc_conf;
};

struct Runtime {
  c10::Device device = c10::Device(c10::kCPU);
  ThreadSettings threads;             // as applied
  std::vector<std::string> warnings;  // e.g. a reference BLAS that makes matrix products ~35x slower
  // What the CUDA caching allocator runs under: the option's, or the environment's; empty for its defaults.
  std::optional<CudaAllocConf> cuda_alloc_conf;
};

// Whether this fitsum was compiled against a CUDA LibTorch (FITSUM_WITH_CUDA).
bool built_with_cuda();
// A CUDA device can be used: this build has CUDA and a device is visible.
bool cuda_visible();

// "cpu", "cuda" or "auto" (CUDA when a device is visible). Throws std::invalid_argument in one line naming `device`
// and why CUDA cannot be had (a CPU-only LibTorch, or no visible device) with what to do instead. On CUDA, process
// `local_rank` of a machine takes device local_rank, as torchrun's workers do (one process per device).
c10::Device resolve_device(const std::string& name, int local_rank = 0);

// Applies the options to the process; call once, before the model is built.
Runtime setup_runtime(const RuntimeOptions& options);

}  // namespace fitsum::util
