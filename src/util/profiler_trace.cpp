// Implements include/fitsum/util/profiler_trace.h with torch/csrc/autograd/profiler_kineto.h (LibTorch 2.x, CUDA
// builds only): prepareProfiler, enableProfiler, then disableProfiler()->save() into a file gzip-compressed here.
#include "fitsum/util/profiler_trace.h"

#include <set>
#include <stdexcept>
#include <system_error>

#include <torch/version.h>

#include "fitsum/util/files.h"
#include "fitsum/util/gzip_file.h"
#include "fitsum/util/torch_compat.h"

#if defined(FITSUM_WITH_CUDA) && FITSUM_TORCH_AT_LEAST(2, 0)
#define FITSUM_HAS_KINETO_TRACE 1
#include <torch/csrc/autograd/profiler_kineto.h>
#else
#define FITSUM_HAS_KINETO_TRACE 0
#endif

namespace fitsum::util {

void check_profiler_trace_available(const c10::Device& device, const std::string& flag) {
  if (!device.is_cuda()) {
    throw std::invalid_argument(flag + " needs --device cuda: it records CUDA kernels with Kineto (on the CPU, "
                                       "--profile records a step)");
  }
  if (!FITSUM_HAS_KINETO_TRACE) {
    throw std::invalid_argument(flag + " needs a CUDA build of fitsum with LibTorch 2.x (this one has " +
                                std::string(TORCH_VERSION) + ")");
  }
}

#if FITSUM_HAS_KINETO_TRACE
namespace {
namespace impl = torch::profiler::impl;
const std::set<impl::ActivityType> kActivities{impl::ActivityType::CPU, impl::ActivityType::CUDA};
}  // namespace

ProfilerTrace::ProfilerTrace(const c10::Device& device) {
  check_profiler_trace_available(device, "--record_profile");
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  torch::autograd::profiler::prepareProfiler(config, kActivities);
  torch::autograd::profiler::enableProfiler(config, kActivities);
  running_ = true;
}

ProfilerTrace::~ProfilerTrace() {
  if (running_) torch::autograd::profiler::disableProfiler();
}

void ProfilerTrace::save(const std::filesystem::path& path) {
  running_ = false;
  auto result = torch::autograd::profiler::disableProfiler();
  const auto plain = path.string() + ".plain.json";  // Kineto writes plain JSON to a path; compressed from there
  result->save(plain);
  const auto text = read_file(plain);
  std::error_code ignored;
  std::filesystem::remove(plain, ignored);
  write_gzip_file(path, text);
}
#else
ProfilerTrace::ProfilerTrace(const c10::Device& device) { check_profiler_trace_available(device, "--record_profile"); }
ProfilerTrace::~ProfilerTrace() = default;
void ProfilerTrace::save(const std::filesystem::path&) {}
#endif

}  // namespace fitsum::util
