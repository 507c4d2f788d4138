#!/usr/bin/env bash
# The GPU checks of fitsum, as one command for a GPU machine (build and run in about 8 minutes on 16 cores):
#   1. build: the CUDA configuration of make build-cuda (scripts/torch2.sh) against the machine's own PyTorch
#      (torch.utils.cmake_prefix_path of $FITSUM_GPU_PYTHON, any 2.x version), in build-gpu/, without the
#      SentencePiece shim; ldd and the c10d NCCL process group (an all-reduce on one rank);
#   2. parity on CUDA (tests/gpu): float32 at the CPU tolerances, bfloat16 autocast within its documented bounds;
#   3. the memory planner on CUDA, the seed's configuration of pegasus-large (random init) under --max_memory:
#      `fitsum plan` predicts allocated and reserved bytes (the CUDA allocator model's terms), `fitsum bench train`
#      measures torch.cuda.max_memory_allocated / max_memory_reserved; then the planner's own choice (bench --plan)
#      under the cap, under the seed's card (FITSUM_GPU_CARD, 7.79GiB) and under 80 GiB (its speed: MFU), AdamW
#      with the optimizer offloaded under the card, and two more cells; each row's prediction against its peaks;
#      and for the seed's and the planned run, what the GPU did: the caching allocator's own history (bench train
#      --record_allocator: every allocation, free and segment action from the process's start, at most
#      FITSUM_GPU_TRACE_ENTRIES entries, default 300000, about 30 MB of JSON and a few MB gzip-compressed; the
#      recording stops between micro-steps before the buffer would drop its first entries), replayed at once
#      through fitsum's allocator model (bench allocator, replay-*.txt in the logs), and a Kineto trace of two more
#      steps of two micro-steps each (bench train --record_profile), all gzip-compressed into $OUT;
#   4. data-parallel on CUDA (NCCL with two GPUs, else Gloo on one);
#   5. the seed's and the planned configurations side by side with HF transformers' Trainer (skipped when the
#      clock is short: the stages run in this order, the most needed first).
#
# Such a machine reaches nothing outside, and the reference fixtures beside the project do not travel with it.
# So, first, where the Debian packages are:
#     bash bench/gpu.sh --prepare      copies into .gpu/ (ignored by git): the nlohmann_json and CLI11 headers,
#                                      GoogleTest's sources and ../shared/fixtures/tiny-pegasus (about 2 MB)
# then on the GPU machine, from the project's root, with .gpu carried along:
#     bash bench/gpu.sh                seven files in $OUT (or .gpu/out): results.json, gpu.log, logs.tar.gz,
#                                      allocator-{seed,planned}.json.gz, profile-{seed,planned}.json.gz (each
#                                      under 16 MB: a larger one is removed and said so)
#     bash bench/gpu.sh --dry-run      prints every command it would run, runs none (works anywhere)
# Every stage runs under a time limit taken from one budget (FITSUM_GPU_BUDGET_S, default 540 s); a stage that
# cannot get its minimum is skipped and said so. Knobs: FITSUM_GPU_STEPS (timed optimizer steps, default 2),
# FITSUM_GPU_SRC_LEN / _TGT_LEN (512 / 128), FITSUM_GPU_CAP (16GiB), FITSUM_PLANNED_FLAGS (when the planner's run
# fails), FITSUM_GPU_SKIP_HF=1, FITSUM_GPU_PYTHON (python3), FITSUM_CUDA_ARCH (9.0), FITSUM_GPU_BUILD_DIR (build-gpu),
# FITSUM_GPU_BUILT=1 (use the binaries already in that folder: no configure, no build).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

mode=run
case "${1:-}" in
  --prepare)
    set -e
    mkdir -p .gpu/third_party/include .gpu/shared/fixtures
    cp -r /usr/include/nlohmann /usr/include/CLI .gpu/third_party/include/
    rm -rf .gpu/third_party/googletest && cp -r /usr/src/googletest .gpu/third_party/googletest
    rm -rf .gpu/shared/fixtures/tiny-pegasus && cp -r ../shared/fixtures/tiny-pegasus .gpu/shared/fixtures/
    du -sh .gpu
    echo "gpu.sh: .gpu/ is ready; carry it to the GPU machine and run: bash bench/gpu.sh"
    exit 0
    ;;
  --dry-run) mode=dry ;;
  "") ;;
  *)
    echo "usage: bash bench/gpu.sh [--prepare | --dry-run]" >&2
    exit 2
    ;;
esac

budget="${FITSUM_GPU_BUDGET_S:-540}"
out="${OUT:-$root/.gpu/out}"
work="$root/.gpu/work"  # every log; packed into $out/logs.tar.gz
if [[ $mode == dry ]]; then
  out="${TMPDIR:-/tmp}/fitsum-gpu-dry-run"
  work="$out/work"
fi
rm -rf "$work"
mkdir -p "$out" "$work"
tee_pid=
if [[ $mode == run ]]; then
  exec > >(tee "$out/gpu.log") 2>&1
  tee_pid=$!
fi
steps="${FITSUM_GPU_STEPS:-2}"
src_len="${FITSUM_GPU_SRC_LEN:-512}"
tgt_len="${FITSUM_GPU_TGT_LEN:-128}"
cap="${FITSUM_GPU_CAP:-16GiB}"
card="${FITSUM_GPU_CARD:-7.79GiB}"  # the seed's card: its usable memory
cap_gib="${cap%GiB}"
python="${FITSUM_GPU_PYTHON:-python3}"
large=build-gpu/pegasus-large/config.json  # the config alone: no tokenizer is needed (the GPU build has no SentencePiece)
mkdir -p build-gpu/pegasus-large && cp data/pegasus/config.json build-gpu/pegasus-large/
build="${FITSUM_GPU_BUILD_DIR:-build-gpu}"
stages="$work/stages.tsv"  # name, status, seconds: for the summary
: >"$stages"

pack() { [[ $mode == run ]] && tar -czf "$out/logs.tar.gz" -C "$work" . 2>/dev/null; return 0; }
# On exit: the logs packed, and gpu.log complete (tee has written everything) before the results are collected.
# shellcheck disable=SC2317  # run by the trap
finish() {
  pack
  if [[ -n $tee_pid ]]; then
    exec 1>&- 2>&-
    wait "$tee_pid" 2>/dev/null
  fi
}
trap finish EXIT

# run NAME CAP_S MIN_S LOG COMMAND...: prints one line; runs COMMAND under the smaller of CAP_S and what is left of
# the budget (keeping 20 s for the summary), or skips it when that is under MIN_S. LOG gets stdout and stderr ("*.json":
# stdout alone, stderr beside it in *.err). Returns the command's status (124: timed out, 125: skipped).
run() {
  local name=$1 cap_s=$2 min_s=$3 log=$4
  shift 4
  if [[ $mode == dry ]]; then
    echo "+ $* > ${log#"$work/"}"
    return 0
  fi
  local left=$((budget - SECONDS - 20)) limit=$cap_s
  ((left < limit)) && limit=$left
  if ((limit < min_s)); then
    printf '  %-22s skipped: %d s left of the %d s budget\n' "$name" "$((budget - SECONDS))" "$budget"
    printf '%s\tskipped\t0\n' "$name" >>"$stages"
    return 125
  fi
  local start=$SECONDS status
  if [[ $log == *.json ]]; then
    timeout -k 5 "$limit" "$@" >"$log" 2>"${log%.json}.err"
  else
    timeout -k 5 "$limit" "$@" >"$log" 2>&1
  fi
  status=$?
  local took=$((SECONDS - start)) verdict=ok
  ((status == 124 || status == 137)) && verdict="TIMED OUT (limit $limit s)"
  ((status != 0 && status != 124 && status != 137)) && verdict="FAILED (exit $status)"
  printf '  %-22s %s, %d s\n' "$name" "$verdict" "$took"
  if ((status != 0)); then  # the last lines that say why
    local reason=$log
    [[ $log == *.json ]] && reason="${log%.json}.err"
    grep -v '^\s*$' "$reason" 2>/dev/null | tail -n 2 | cut -c1-240 | sed 's/^/    /'
  fi
  printf '%s\t%s\t%d\n' "$name" "${verdict%% *}" "$took" >>"$stages"
  pack
  return $status
}
show() { [[ $mode == run ]] && "$@"; return 0; }

echo "gpu.sh: budget $budget s; results in $out"
if [[ $mode == run ]]; then
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
    timeout 60 "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())'
    timeout 60 "$python" -c 'import transformers; print("transformers", transformers.__version__)' 2>/dev/null ||
      echo "transformers: not importable"
    echo "$(nproc) cores, $(cmake --version | head -1), nvcc $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo missing)"
  } >"$work/machine.txt" 2>&1
  sed 's/^/  /' "$work/machine.txt"
fi

echo "== build ($build/, against $python's PyTorch)"
[[ -d .gpu/third_party || $mode == dry ]] || echo "gpu.sh: .gpu/third_party missing (run bash bench/gpu.sh --prepare where the packages are)"
JOBS=$(nproc)
export FITSUM_TORCH2_PYTHON="$python" FITSUM_THIRD_PARTY_DIR="$root/.gpu/third_party" JOBS
export CMAKE_POLICY_VERSION_MINIMUM=3.5  # GoogleTest's old minimum under CMake 4
if [[ "${FITSUM_GPU_BUILT:-0}" == 1 ]]; then
  echo "  using the binaries in $build/ (FITSUM_GPU_BUILT=1)"
elif ! run configure 120 30 "$work/configure.log" bash scripts/torch2.sh configure "$build" \
  -DFITSUM_WITH_SENTENCEPIECE=OFF -DFITSUM_BUILD_BENCH=OFF -DFITSUM_SHARED_DIR="$root/.gpu/shared"; then
  tail -25 "$work/configure.log"
  exit 1
fi
# fitsum, fitsum_gpu_tests and, where configure found the NCCL this PyTorch loads, fitsum_nccl_check.
if [[ "${FITSUM_GPU_BUILT:-0}" != 1 ]] && ! run build 330 60 "$work/build.log" bash scripts/torch2.sh build "$build"; then
  grep -m8 -A8 "error" "$work/build.log" | head -60
  exit 1
fi
[[ "${FITSUM_GPU_SKIP_CHECK:-0}" == 1 ]] || run ldd+nccl 60 10 "$work/check.log" bash scripts/torch2.sh check "$build"
show grep -E "libtorch_cuda|libnccl|not found|NCCL|all-reduce" "$work/check.log" | head -6 | sed 's/^ */    /'

echo "== parity tests on CUDA"
run parity-tests 120 20 "$work/gpu_tests.log" "./$build/tests/fitsum_gpu_tests" --gtest_output="json:$work/gpu_tests.json"
show grep -E "^\[  FAILED  \]|^\[  PASSED  \]|Failure$" "$work/gpu_tests.log" | sort -u | head -12 | sed 's/^/    /'

echo "== planner on CUDA: pegasus-large, the seed's configuration, --max_memory $cap, $src_len / $tgt_len tokens"
seed_flags=(--per_device_train_batch_size 1 --gradient_accumulation_steps 64 --no_resplit --optim adafactor
  --gradient_checkpointing)
run plan-seed 90 20 "$work/plan.json" "./$build/fitsum" plan --device cuda --config_name "$large" \
  --max_source_length "$src_len" --max_target_length "$tgt_len" "${seed_flags[@]}" --max_memory "$cap" --format json

echo "== measured: fitsum bench train, $steps timed steps"
bench=(bench train --device cuda --config_name "$large" --src_len "$src_len" --tgt_len "$tgt_len" --steps "$steps"
  --warmup 1 --record_allocator_entries "${FITSUM_GPU_TRACE_ENTRIES:-300000}")
records() { echo --record_allocator "$out/allocator-$1.json.gz" --record_profile "$out/profile-$1.json.gz"; }
# shellcheck disable=SC2046  # the record flags are words
run fitsum-seed 120 30 "$work/fitsum-seed.json" "./$build/fitsum" "${bench[@]}" --max_memory "$cap" --batch 1 \
  --gradient_accumulation_steps 64 --gradient_checkpointing --optim adafactor $(records seed)
# shellcheck disable=SC2046
run fitsum-planned 120 30 "$work/fitsum-planned.json" "./$build/fitsum" "${bench[@]}" --max_memory "$cap" --batch 1 \
  --gradient_accumulation_steps 64 --bf16 --plan $(records planned)
echo "== the allocator model replayed against each recorded history"
for name in seed planned; do
  if [[ $mode == dry || -s "$out/allocator-$name.json.gz" ]]; then
    run "replay-$name" 60 5 "$work/replay-$name.txt" "./$build/fitsum" bench allocator "$out/allocator-$name.json.gz"
    show grep -E "^(first divergence|verdict|peak)" "$work/replay-$name.txt" | sed 's/^/    /'
  fi
done
# At most 8 files of 16 MB come back: a record past that is dropped (its replay above is kept in the logs).
if [[ $mode == run ]]; then
  for f in "$out"/allocator-*.json.gz "$out"/profile-*.json.gz; do
    [[ -f $f ]] || continue
    if (($(stat -c %s "$f") > 16 * 1024 * 1024)); then
      echo "gpu.sh: $(basename "$f") is over 16 MB ($(stat -c %s "$f") bytes): removed (lower FITSUM_GPU_TRACE_ENTRIES)"
      rm -f "$f"
    fi
  done
fi

echo "== the seed's card ($card): the planner's choice trains under it; AdamW with the optimizer offloaded"
run plan-card 60 15 "$work/plan-card.json" "./$build/fitsum" plan --device cuda --config_name "$large" \
  --max_source_length "$src_len" --max_target_length "$tgt_len" --per_device_train_batch_size 1 \
  --gradient_accumulation_steps 64 --max_memory "$card" --format json
run fitsum-card 120 30 "$work/fitsum-card.json" "./$build/fitsum" "${bench[@]}" --max_memory "$card" --batch 1 \
  --gradient_accumulation_steps 64 --bf16 --plan
run fitsum-offload 150 40 "$work/fitsum-offload.json" "./$build/fitsum" "${bench[@]}" --max_memory "$card" \
  --batch 1 --gradient_accumulation_steps 64 --gradient_checkpointing --optim adamw_torch --offload_optimizer cpu

echo "== 80 GiB: the planner's choice, for speed (MFU); two more cells of the planner under $cap"
run fitsum-80g 120 30 "$work/fitsum-80g.json" "./$build/fitsum" "${bench[@]}" --max_memory 80GiB --batch 1 \
  --gradient_accumulation_steps 64 --bf16 --plan
run fitsum-cell-a 90 25 "$work/fitsum-cell-a.json" "./$build/fitsum" "${bench[@]}" --max_memory "$cap" --batch 4 \
  --gradient_accumulation_steps 16 --bf16 --optim adafactor
run fitsum-cell-b 90 25 "$work/fitsum-cell-b.json" "./$build/fitsum" "${bench[@]}" --max_memory "$cap" --batch 8 \
  --gradient_accumulation_steps 8 --bf16 --gradient_checkpointing --optim adamw_torch

echo "== data-parallel on CUDA: 2 processes x accumulation 1 against 1 x 2, the tiny fixture"
run data-parallel 90 20 "$work/data_parallel.log" bash bench/gpu_data_parallel.sh "./$build/fitsum" \
  "$root/.gpu/shared/fixtures/tiny-pegasus" "$work/data-parallel"
show cat "$work/data_parallel.log"

# The planner's choice as the HF Trainer's flags (all layers checkpointed when it checkpoints some).
planned="${FITSUM_PLANNED_FLAGS:---batch 4 --accumulation 16 --bf16}"
if [[ $mode == run ]] && grep -q '^{' "$work/fitsum-planned.json" 2>/dev/null; then
  planned=$("$python" -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
flags = ["--batch", str(r["batch"]), "--accumulation", str(r["gradient_accumulation_steps"]), "--optim", r["optim"]]
flags += ["--gradient_checkpointing"] if r.get("gradient_checkpointing") else []
flags += ["--bf16"] if r.get("bf16") else []
print(" ".join(flags))' "$work/fitsum-planned.json" 2>/dev/null || echo "$planned")
fi

echo "== HF Trainer side by side (same shapes, cap $cap)"
if [[ "${FITSUM_GPU_SKIP_HF:-0}" == 1 ]]; then
  echo "  skipped (FITSUM_GPU_SKIP_HF=1)"
else
  hf=(env PYTHONUNBUFFERED=1 "$python" bench/hf_trainer_bench.py --config "$large" --src_len "$src_len"
    --tgt_len "$tgt_len" --steps "$steps" --warmup 1 --max_memory_gib "$cap_gib")
  run hf-seed 150 60 "$work/hf-seed.json" "${hf[@]}" --batch 1 --accumulation 64 --gradient_checkpointing \
    --optim adafactor
  # shellcheck disable=SC2086  # the planned flags are words
  run hf-planned 120 60 "$work/hf-planned.json" "${hf[@]}" $planned
fi

echo "== summary"
if [[ $mode == dry ]]; then
  echo "+ $python bench/gpu_summary.py $work $out/results.json"
  exit 0
fi
"$python" bench/gpu_summary.py "$work" "$out/results.json" || echo "gpu.sh: the summary failed"
failures=$(awk -F'\t' '$2 != "ok" && $2 != "skipped"' "$stages" | wc -l)
echo "gpu.sh: done in $SECONDS s, $failures failed stage(s); $out: results.json, gpu.log, logs.tar.gz, $(find "$out" -maxdepth 1 -name '*.json.gz' -printf '%f ')"
exit $((failures > 0))
