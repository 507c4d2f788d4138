// The training device from its flag value ("cpu", "cuda", "auto"), with a one-line reason when CUDA is asked for
// and cannot be had: a CPU-only LibTorch, or a CUDA LibTorch that sees no device.
#pragma once

#include <string>

#include <c10/core/Device.h>

namespace fitsum::util {

// Whether this fitsum was compiled against a CUDA LibTorch (FITSUM_WITH_CUDA).
bool built_with_cuda();

// "cpu", "cuda" (the first device), or "auto" when `allow_auto` (CUDA when a device is visible, else the CPU).
// Throws std::invalid_argument naming the flag value and what to do instead.
c10::Device parse_device(const std::string& name, bool allow_auto = true);

}  // namespace fitsum::util
