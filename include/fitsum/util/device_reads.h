// The one way training code reads a device tensor's values on the host. On CUDA every such read waits for the
// device to finish all the work queued before it (a synchronisation that leaves the GPU idle until the host queues
// more), so a training step makes none: the trainer keeps its loss and gradient norm on the device and reads them
// here once per log, evaluation, save and at the end. Each call is counted, so tests can hold the trainer to that
// (tests/unit/device_reads_test.cpp, tests/integration/device_reads_test.cpp).
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace fitsum::util {

// A CPU copy of `t` (t itself when it is already on the CPU), after everything queued before it has run.
// Counts one read.
at::Tensor read_to_host(const at::Tensor& t);

// The reads made through read_to_host by this process so far.
std::int64_t device_reads();

}  // namespace fitsum::util
