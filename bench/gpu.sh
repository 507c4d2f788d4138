#!/usr/bin/env bash
# The GPU checks of fitsum, as one command for a GPU machine (build and run within 10 minutes on 16 cores):
#   1. build: the CUDA configuration of make build-cuda (scripts/torch2.sh) against the machine's own PyTorch, in
#      build-gpu/, without the SentencePiece shim; ldd and the c10d NCCL process group (an all-reduce on one rank);
#   2. parity on CUDA (tests/gpu): float32 at the CPU tolerances, bfloat16 autocast within its documented bounds;
#   3. the memory planner on CUDA, the seed's configuration of pegasus-large (random init) under --max_memory:
#      `fitsum plan` predicts allocated and reserved bytes (the CUDA allocator model's terms), `fitsum bench train`
#      measures torch.cuda.max_memory_allocated / max_memory_reserved;
#   4. the same configuration and fitsum's planned one side by side with HF transformers' Trainer.
#
# Such a machine reaches nothing outside, and the reference fixtures beside the project do not travel with it.
# So, first, where the Debian packages are:
#     bash bench/gpu.sh --prepare      copies into .gpu/ (ignored by git): the nlohmann_json and CLI11 headers,
#                                      GoogleTest's sources and ../shared/fixtures/tiny-pegasus (about 2 MB)
# then on the GPU machine, from the project's root, with .gpu carried along:
#     bash bench/gpu.sh                logs and JSON lines go to $OUT (or .gpu/out)
#     bash bench/gpu.sh --dry-run      prints every command it would run, runs none (works anywhere)
# Knobs: FITSUM_GPU_STEPS (timed optimizer steps, default 2), FITSUM_GPU_SRC_LEN / _TGT_LEN (512 / 128),
# FITSUM_GPU_CAP (16GiB), FITSUM_PLANNED_FLAGS, FITSUM_GPU_SKIP_HF=1, FITSUM_GPU_PYTHON (python3), FITSUM_CUDA_ARCH.
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

out="${OUT:-$root/.gpu/out}"
[[ $mode == dry ]] && out="${TMPDIR:-/tmp}/fitsum-gpu-dry-run"
mkdir -p "$out"
[[ $mode == run ]] && exec > >(tee -a "$out/gpu.log") 2>&1
steps="${FITSUM_GPU_STEPS:-2}"
src_len="${FITSUM_GPU_SRC_LEN:-512}"
tgt_len="${FITSUM_GPU_TGT_LEN:-128}"
cap="${FITSUM_GPU_CAP:-16GiB}"
cap_gib="${cap%GiB}"
planned="${FITSUM_PLANNED_FLAGS:---batch 4 --gradient_accumulation_steps 16 --bf16}"
python="${FITSUM_GPU_PYTHON:-python3}"
large=data/pegasus/config.json
build=build-gpu
failures=0
stage() { echo; echo "== $* ($(date +%T))"; }
# Prints a command; runs it unless --dry-run. Output goes to the file named first ("-" for the terminal).
run() {
  local log=$1
  shift
  echo "+ $*${log:+$([[ $log != - ]] && echo " > $log")}"
  [[ $mode == dry ]] && return 0
  if [[ $log == - ]]; then
    "$@"
  elif [[ $log == *.json ]]; then
    "$@" >"$log" 2>"${log%.json}.err"  # the JSON alone on stdout, logs beside it
  else
    "$@" >"$log" 2>&1
  fi
}
failed() { failures=$((failures + 1)); echo "gpu.sh: FAILED: $*"; }

stage "machine"
run - nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
run - "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
run - "$python" -c 'import transformers; print("transformers", transformers.__version__)'

stage "build: make build-cuda's configuration against the machine's PyTorch, in $build/"
[[ -d .gpu/third_party || $mode == dry ]] || echo "gpu.sh: .gpu/third_party missing (run bash bench/gpu.sh --prepare where the packages are)"
export FITSUM_TORCH2_PYTHON="$python" FITSUM_THIRD_PARTY_DIR="$root/.gpu/third_party" JOBS="$(nproc)"
export CMAKE_POLICY_VERSION_MINIMUM=3.5  # GoogleTest's old minimum under CMake 4
start=$SECONDS
if ! run "$out/configure.log" bash scripts/torch2.sh configure "$build" -DFITSUM_WITH_SENTENCEPIECE=OFF \
  -DFITSUM_BUILD_BENCH=OFF -DFITSUM_SHARED_DIR="$root/.gpu/shared"; then
  tail -40 "$out/configure.log"
  echo "gpu.sh: configure failed"
  exit 1
fi
if ! run "$out/build.log" bash scripts/torch2.sh build "$build" fitsum fitsum_gpu_tests fitsum_nccl_check; then
  grep -B2 -A12 -m5 "error" "$out/build.log" | head -120
  echo "gpu.sh: build failed"
  exit 1
fi
[[ $mode == run ]] && echo "built in $((SECONDS - start)) s"
run - bash scripts/torch2.sh check "$build" || failed "ldd / NCCL check"

stage "parity tests on CUDA"
run "$out/gpu_tests.log" "./$build/tests/fitsum_gpu_tests" --gtest_output="json:$out/gpu_tests.json" || failed "parity tests"
[[ $mode == run ]] && grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|Expected|Which is|actual" "$out/gpu_tests.log" | head -60

seed_flags=(--per_device_train_batch_size 1 --gradient_accumulation_steps 64 --no_resplit --optim adafactor
  --gradient_checkpointing)
stage "planner on CUDA: $large, the seed's configuration, --max_memory $cap"
run "$out/plan.json" "./$build/fitsum" plan --device cuda --config_name "$large" --max_source_length "$src_len" \
  --max_target_length "$tgt_len" "${seed_flags[@]}" --max_memory "$cap" --format json || failed "fitsum plan"

stage "side by side on CUDA, cap $cap, source $src_len / target $tgt_len tokens, $steps timed steps"
results="$out/side_by_side.jsonl"
[[ $mode == run ]] && : >"$results"
tag() { "$python" -c "import json,sys; [print(json.dumps({**json.loads(l), 'config': '$1'})) for l in sys.stdin if l.startswith('{')]"; }
run_fitsum() { # label, flags...
  local label=$1
  shift
  run "$out/fitsum-$label.log" "./$build/fitsum" bench train --device cuda --config_name "$large" --src_len "$src_len" \
    --tgt_len "$tgt_len" --steps "$steps" --warmup 1 --optim adafactor --max_memory "$cap" "$@" ||
    { failed "fitsum $label"; tail -5 "$out/fitsum-$label.log"; }
  [[ $mode == run ]] && tag "$label" <"$out/fitsum-$label.log" >>"$results"
}
run_hf() { # label, flags...
  local label=$1
  shift
  [[ "${FITSUM_GPU_SKIP_HF:-0}" == 1 ]] && return
  run "$out/hf-$label.log" env PYTHONUNBUFFERED=1 "$python" bench/hf_trainer_bench.py --config "$large" \
    --src_len "$src_len" --tgt_len "$tgt_len" --steps "$steps" --warmup 1 --optim adafactor \
    --max_memory_gib "$cap_gib" "$@" || { failed "hf $label"; tail -20 "$out/hf-$label.log"; }
  [[ $mode == run ]] && tag "$label" <"$out/hf-$label.log" >>"$results"
}
run_hf seed --batch 1 --accumulation 64 --gradient_checkpointing
run_fitsum seed --batch 1 --gradient_accumulation_steps 64 --gradient_checkpointing
# shellcheck disable=SC2086  # the planned flags are words
run_hf planned $(echo "$planned" | sed 's/--gradient_accumulation_steps/--accumulation/')
# shellcheck disable=SC2086
run_fitsum planned $planned

stage "summary"
run - "$python" bench/gpu_summary.py "$out/plan.json" "$results"
echo "gpu.sh: done, $failures failure(s); logs in $out"
exit $((failures > 0))
