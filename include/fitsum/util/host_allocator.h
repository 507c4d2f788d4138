// The allocator behind malloc, which LibTorch's CPU tensors come from.
//
// fitsum's programs are linked with gperftools' TCMalloc (CMakeLists.txt, FITSUM_WITH_TCMALLOC). A training step
// frees and allocates the same activation buffers every step, in an order that leaves glibc's heap fragmented:
// its peak resident set on the small benchmark is ~360 MiB above the peak of live tensors, against ~230 MiB with
// TCMalloc (its size-class spans and page heap place the step's blocks again where they were freed), at the same
// speed (docs/performance.md). It returns freed spans to the system at a release rate (gperftools' default 1); at its
// default a long-input step keeps spans it cannot reuse: training PEGASUS-X base (2 + 2 layers) at 4096 source tokens
// peaks at 2521 MiB resident for 1735 MiB of tensors. At rate 10 the same run peaks at 2264-2269 MiB (three runs) at
// the same step time, and the small benchmark's peak and step time do not move; rates 5, 30 and 100 gave 2521, 2257
// and 2511 MiB (bench/results/2026-12-06-pegasus-x-4096-idle.md). Training processes set rate 10 unless
// TCMALLOC_RELEASE_RATE is set in the environment.
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

// TCMalloc's release rate for training processes.
inline constexpr double kTrainingReleaseRate = 10.0;

// Process-wide; harmless to call more than once. Under TCMalloc it sets the release rate (when the environment does
// not), under glibc the thresholds above; a no-op elsewhere.
void tune_host_allocator_for_training();

// TCMalloc's current release rate; -1 where malloc is not TCMalloc (or its extension interface was not built in).
double host_allocator_release_rate();

// Whether malloc in this process is TCMalloc's (linked, or preloaded with LD_PRELOAD).
bool host_allocator_is_tcmalloc();
// "TCMalloc (gperftools 2.10)", "glibc malloc 2.36" or "malloc".
std::string host_allocator_description();

}  // namespace fitsum::util
