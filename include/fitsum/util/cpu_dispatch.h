// Function multiversioning: a loop compiled once for AVX2 and once for plain x86-64, the loader picking the one the
// processor runs. GCC clones function templates too; clang (the compiler of the sanitizer and fuzzing builds) does
// not yet, so there templates are compiled once, for plain x86-64, which changes their speed and not their results.
#pragma once

#define FITSUM_CLONES __attribute__((target_clones("avx2", "default")))
#if defined(__clang__)
#define FITSUM_TEMPLATE_CLONES
#else
#define FITSUM_TEMPLATE_CLONES FITSUM_CLONES
#endif
