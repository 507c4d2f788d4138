// Implements include/fitsum/util/host_allocator.h with glibc's mallopt.
#include "fitsum/util/host_allocator.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace fitsum::util {

void tune_host_allocator_for_training() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum: only blocks above 32 MiB are mapped one by one
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // keep up to 1 GiB of freed memory at the top of the heap
#endif
}

}  // namespace fitsum::util
