// The allocator behind malloc, which LibTorch's CPU tensors come from.
//
// fitsum's programs are linked with gperftools' TCMalloc (CMakeLists.txt, FITSUM_WITH_TCMALLOC). A training step
// frees and allocates the same activation buffers every step, in an order that leaves glibc's heap fragmented:
// its peak resident set on the small benchmark is ~360 MiB above the peak of live tensors, against ~230 MiB with
// TCMalloc (its size-class spans and page heap place the step's blocks again where they were freed), at the same
// speed (docs/performance.md).
//
// Where malloc is glibc's (a build without TCMalloc), its defaults suit programs that free memory for good: blocks
// above a threshold (128 KiB at first, adapting up to 32 MiB) come straight from mmap and go back to the system on
// free, and free memory at the top of the heap beyond twice that threshold is returned too. Under them many of a
// step's allocations are fresh pages that the kernel must fault in and zero (~30k page faults per step of the
// `small` benchmark), so training processes call tune_host_allocator_for_training once at start-up: the threshold
// is fixed at its maximum and freed memory stays in the heap for the next step.
#pragma once

#include <string>

namespace fitsum::util {

// Process-wide; harmless to call more than once. A no-op under TCMalloc and where the C library is not glibc.
void tune_host_allocator_for_training();

// Whether malloc in this process is TCMalloc's (linked, or preloaded with LD_PRELOAD).
bool host_allocator_is_tcmalloc();
// "TCMalloc (gperftools 2.10)", "glibc malloc 2.36" or "malloc".
std::string host_allocator_description();

}  // namespace fitsum::util
