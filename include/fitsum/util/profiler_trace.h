// LibTorch's Kineto profiler around a few steps of a CUDA run (CPU operators and CUDA kernels), its
// chrome://tracing JSON written gzip-compressed: what a GPU run brings back besides its timings.
#pragma once

#include <filesystem>
#include <string>

#include <c10/core/Device.h>

namespace fitsum::util {

// Throws std::invalid_argument naming `flag` when the trace cannot be recorded: off CUDA (the CPU's profile is
// `fitsum bench train --profile`'s), or in a build without CUDA.
void check_profiler_trace_available(const c10::Device& device, const std::string& flag);

// Profiles from construction to save().
class ProfilerTrace {
 public:
  explicit ProfilerTrace(const c10::Device& device);
  ~ProfilerTrace();  // stops the profiler when save() did not
  ProfilerTrace(const ProfilerTrace&) = delete;
  ProfilerTrace& operator=(const ProfilerTrace&) = delete;
  // Stops and writes the trace to `path` (gzip). Throws std::runtime_error naming the file.
  void save(const std::filesystem::path& path);

 private:
  bool running_ = false;
};

}  // namespace fitsum::util
