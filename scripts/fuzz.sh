#!/usr/bin/env bash
# Runs every libFuzzer target of fuzz/ (built in a FITSUM_FUZZ build folder): first its committed regression
# inputs (fuzz/regressions/<target>/, each must run clean), then FUZZ_SECONDS (default 60) of fuzzing from its seed
# corpus (fuzz/corpus/<target>/, read only: new inputs go to a scratch folder). Prints the executions per target.
# A finding stops the run with the input saved under FUZZ_ARTIFACTS (default <build>/fuzz-findings/); minimize it
# (<target>_fuzzer -minimize_crash=1 FILE) and commit it under fuzz/regressions/<target>/ with the fix.
set -euo pipefail
build=${1:-build-sanitize}
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-safetensors pytorch_bin config records tokenizer bart_tokenizer rouge checkpoint_state}
artifacts=${FUZZ_ARTIFACTS:-$build/fuzz-findings}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/sanitizers/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$root/sanitizers/ubsan.supp}

summary=()
for target in $targets; do
  binary="$build/fuzz/${target}_fuzzer"
  [[ -x "$binary" ]] || { echo "fuzz: $binary is missing (make fuzz builds it)" >&2; exit 1; }
  regressions=("$root/fuzz/regressions/$target"/*)
  if [[ -e "${regressions[0]}" ]]; then
    echo "fuzz: $target: ${#regressions[@]} regression inputs"
    "$binary" -rss_limit_mb=4096 -timeout=60 "${regressions[@]}" >"$artifacts/$target-regressions.log" 2>&1 ||
      { tail -40 "$artifacts/$target-regressions.log"; echo "fuzz: $target: a regression input fails" >&2; exit 1; }
  fi
  scratch=$(mktemp -d)
  echo "fuzz: $target: ${seconds}s"
  if ! "$binary" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 \
       -artifact_prefix="$artifacts/$target-" "$scratch" "$root/fuzz/corpus/$target" >"$artifacts/$target.log" 2>&1; then
    tail -60 "$artifacts/$target.log"
    rm -rf "$scratch"
    echo "fuzz: $target: finding saved under $artifacts/ (see the log above)" >&2
    exit 1
  fi
  rm -rf "$scratch"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$artifacts/$target.log" | tail -1)
  summary+=("$(printf '%-12s %10s executions in %ss, clean' "$target" "${runs:-?}" "$seconds")")
done
printf 'fuzz: %s\n' "${summary[@]}"
