// Implements include/fitsum/util/host_allocator.h: TCMalloc is recognised by its tc_version symbol, glibc's malloc
// is tuned with mallopt.
#include "fitsum/util/host_allocator.h"

#include <dlfcn.h>

#include <cstdlib>

#if __has_include(<gperftools/malloc_extension.h>)
#include <gperftools/malloc_extension.h>
#define FITSUM_HAS_MALLOC_EXTENSION 1
#else
#define FITSUM_HAS_MALLOC_EXTENSION 0
#endif

#if defined(__GLIBC__)
#include <malloc.h>
#include <gnu/libc-version.h>
#endif

namespace fitsum::util {

namespace {

// gperftools' `const char* tc_version(int* major, int* minor, const char** patch)`, when TCMalloc is loaded.
using TcVersion = const char* (*)(int*, int*, const char**);

TcVersion tcmalloc_version() { return reinterpret_cast<TcVersion>(::dlsym(RTLD_DEFAULT, "tc_version")); }

#if FITSUM_HAS_MALLOC_EXTENSION
// gperftools' MallocExtension::instance(), looked up at run time: the library is linked into fitsum's programs but
// not into every program that links fitsum's library (sanitizer builds, FITSUM_WITH_TCMALLOC=OFF).
MallocExtension* malloc_extension() {
  using Instance = MallocExtension* (*)();
  const auto instance = reinterpret_cast<Instance>(::dlsym(RTLD_DEFAULT, "_ZN15MallocExtension8instanceEv"));
  return instance != nullptr && host_allocator_is_tcmalloc() ? instance() : nullptr;
}
#endif

}  // namespace

bool host_allocator_is_tcmalloc() { return tcmalloc_version() != nullptr; }

std::string host_allocator_description() {
  if (const auto version = tcmalloc_version()) {
    int major = 0, minor = 0;
    const char* patch = nullptr;
    const char* text = version(&major, &minor, &patch);
    return std::string("TCMalloc (") + (text != nullptr ? text : "gperftools") + ")";
  }
#if defined(__GLIBC__)
  return std::string("glibc malloc ") + gnu_get_libc_version();
#else
  return "malloc";
#endif
}

double host_allocator_release_rate() {
#if FITSUM_HAS_MALLOC_EXTENSION
  if (auto* extension = malloc_extension()) return extension->GetMemoryReleaseRate();
#endif
  return -1.0;
}

void tune_host_allocator_for_training() {
  if (host_allocator_is_tcmalloc()) {
    // Its mallopt is a no-op; it keeps freed spans for reuse itself and returns them at its release rate.
#if FITSUM_HAS_MALLOC_EXTENSION
    auto* extension = malloc_extension();
    if (extension != nullptr && std::getenv("TCMALLOC_RELEASE_RATE") == nullptr) {
      extension->SetMemoryReleaseRate(kTrainingReleaseRate);
    }
#endif
    return;
  }
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum: only blocks above 32 MiB are mapped one by one
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // keep up to 1 GiB of freed memory at the top of the heap
#endif
}

}  // namespace fitsum::util
