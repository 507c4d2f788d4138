#!/usr/bin/env bash
# Runs the default test suite (everything but the slow, gpu and hf labels) in a sanitizer build folder
# (FITSUM_SANITIZE=ON: ASan, UBSan, LeakSanitizer). Any report fails the test that triggered it: UBSan halts on the
# first error, ASan and LSan make the process exit non-zero. The suppression files in sanitizers/ cover
# LibTorch's and OpenBLAS's own uninstrumented internals only, never fitsum's code (each entry says why).
set -euo pipefail
build=${1:-build-sanitize}
root=$(cd "$(dirname "$0")/.." && pwd)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:check_initialization_order=1:strict_init_order=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/sanitizers/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$root/sanitizers/ubsan.supp}
cd "$build"
ctest --output-on-failure -LE "slow|gpu|hf" -j "${JOBS:-$(nproc)}" ${CTEST_FLAGS:-}
