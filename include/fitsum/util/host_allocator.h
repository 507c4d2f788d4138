// glibc malloc's defaults suit programs that free memory for good: blocks above a threshold (128 KiB at first,
// adapting up to 32 MiB) come straight from mmap and go back to the system on free, and free memory at the top of
// the heap beyond twice that threshold is returned too. A training step frees and allocates the same activation
// buffers every step, so under those defaults many of its allocations are fresh pages that the kernel must fault
// in and zero (~30k page faults per step of the `small` benchmark). Training processes call this once at start-up:
// the threshold is fixed at its maximum and freed memory stays in the heap for the next step. Peak resident memory
// is unchanged (the memory was in use at the peak anyway); it is returned when the process ends.
#pragma once

namespace fitsum::util {

// Process-wide; harmless to call more than once. A no-op where the C library is not glibc.
void tune_host_allocator_for_training();

}  // namespace fitsum::util
