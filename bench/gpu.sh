#!/usr/bin/env bash
# The GPU checks of fitsum, as one script for a lent GPU machine (budget: build and run in well under 10 minutes):
#   1. build fitsum against the machine's PyTorch LibTorch (CUDA), without the SentencePiece shim;
#   2. the parity tests on CUDA (tests/gpu: float32 at the CPU tolerances, bfloat16 autocast at looser ones);
#   3. pegasus-large (random init) side by side with HF transformers' PegasusForConditionalGeneration + Trainer
#      under a 16 GiB cap, in the seed's configuration (batch 1, accumulation 64, checkpointing, Adafactor) and in
#      fitsum's planned one (FITSUM_PLANNED_FLAGS; the memory planner's choice once it lands), printing samples/s
#      and peak allocated / reserved memory of each.
#
# Such a machine can reach nothing outside, and the reference fixtures beside the project do not travel with it.
# So, first, on the development machine (Debian packages installed):
#     bash bench/gpu.sh --prepare      copies into .gpu/ (ignored by git): the nlohmann_json and CLI11 headers,
#                                      GoogleTest's sources and ../shared/fixtures/tiny-pegasus
# then on the GPU machine, from the project's root, with .gpu carried along:
#     bash bench/gpu.sh                logs and JSON lines go to $OUT (or .gpu/out)
# Knobs: FITSUM_GPU_STEPS (timed optimizer steps, default 2), FITSUM_GPU_SRC_LEN / _TGT_LEN (512 / 128),
# FITSUM_GPU_CAP (16GiB), FITSUM_PLANNED_FLAGS, FITSUM_GPU_SKIP_HF=1.
# FITSUM_GPU_DRY_RUN=1 checks the script on a machine without a GPU: the same steps on the CPU, with the
# third-party fallback forced, the tiny shape, 2 micro-batches per step and no HF run.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [[ "${1:-}" == "--prepare" ]]; then
  set -e
  mkdir -p .gpu/third_party/include .gpu/shared/fixtures
  cp -r /usr/include/nlohmann /usr/include/CLI .gpu/third_party/include/
  rm -rf .gpu/third_party/googletest && cp -r /usr/src/googletest .gpu/third_party/googletest
  rm -rf .gpu/shared/fixtures/tiny-pegasus && cp -r ../shared/fixtures/tiny-pegasus .gpu/shared/fixtures/
  du -sh .gpu
  echo "gpu.sh: .gpu/ is ready; carry it to the GPU machine and run: bash bench/gpu.sh"
  exit 0
fi

out="${OUT:-$root/.gpu/out}"
mkdir -p "$out"
log="$out/gpu.log"
exec > >(tee -a "$log") 2>&1
steps="${FITSUM_GPU_STEPS:-2}"
src_len="${FITSUM_GPU_SRC_LEN:-512}"
tgt_len="${FITSUM_GPU_TGT_LEN:-128}"
cap="${FITSUM_GPU_CAP:-16GiB}"
cap_gib="${cap%GiB}"
planned="${FITSUM_PLANNED_FLAGS:---batch 4 --gradient_accumulation_steps 16 --bf16}"
large=data/pegasus/config.json
device=cuda
seed_accumulation=64
cmake_extra=()
if [[ "${FITSUM_GPU_DRY_RUN:-0}" == 1 ]]; then
  device=cpu
  large=configs/pegasus-tiny/config.json
  seed_accumulation=2
  planned="--batch 2 --gradient_accumulation_steps 1 --bf16"
  src_len=64
  tgt_len=16
  export FITSUM_GPU_SKIP_HF=1 FITSUM_GPU_TESTS_ON_CPU=1
  cmake_extra=(-DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON
               -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON)
fi
failures=0
stage() { echo; echo "== $* ($(date +%T))"; }

stage "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
python3 -c 'import transformers; print("transformers", transformers.__version__)' || true
echo "$(nproc) cores"

stage "configure and build against $(python3 -c 'import torch; print(torch.__version__)')"
[[ -d .gpu/third_party ]] || echo "gpu.sh: .gpu/third_party missing (run bash bench/gpu.sh --prepare where the packages are)"
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
export CMAKE_POLICY_VERSION_MINIMUM=3.5  # GoogleTest's old minimum under CMake 4
# Torch's CMake config needs no GPU probe with the architecture named (Hopper).
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
start=$SECONDS
if ! cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" \
     -DFITSUM_WITH_SENTENCEPIECE=OFF -DFITSUM_BUILD_BENCH=OFF -DFITSUM_THIRD_PARTY_DIR="$root/.gpu/third_party" \
     -DFITSUM_SHARED_DIR="$root/.gpu/shared" "${cmake_extra[@]}" >"$out/configure.log" 2>&1; then
  tail -40 "$out/configure.log"; echo "gpu.sh: configure failed"; exit 1
fi
if ! cmake --build build-gpu -j "${FITSUM_GPU_JOBS:-$(nproc)}" --target fitsum fitsum_gpu_tests >"$out/build.log" 2>&1; then
  grep -B2 -A12 -m5 "error" "$out/build.log" | head -120; echo "gpu.sh: build failed"; exit 1
fi
echo "built in $((SECONDS - start)) s"

stage "parity tests on $device"
./build-gpu/tests/fitsum_gpu_tests --gtest_output="json:$out/gpu_tests.json" 2>&1 | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|Expected|Which is|actual" | head -60
[[ ${PIPESTATUS[0]} -eq 0 ]] || { failures=$((failures + 1)); echo "gpu.sh: parity tests FAILED"; }

stage "$large side by side on $device, cap $cap, source $src_len / target $tgt_len tokens, $steps timed steps"
results="$out/side_by_side.jsonl"
: >"$results"
run_fitsum() {  # label, flags...
  local label=$1; shift
  echo "-- fitsum $label: $*"
  ./build-gpu/fitsum bench train --device "$device" --config_name "$large" --src_len "$src_len" --tgt_len "$tgt_len" \
    --steps "$steps" --warmup 1 --optim adafactor --max_memory "$cap" "$@" 2>&1 | tee "$out/fitsum-$label.log" |
    grep '^{' | python3 -c "import json,sys; [print(json.dumps({**json.loads(l), 'config': '$label'})) for l in sys.stdin]" \
    >>"$results" || { failures=$((failures + 1)); tail -5 "$out/fitsum-$label.log"; }
}
run_hf() {  # label, flags...
  local label=$1; shift
  [[ "${FITSUM_GPU_SKIP_HF:-0}" == 1 ]] && return
  echo "-- hf $label: $*"
  PYTHONUNBUFFERED=1 python3 bench/hf_trainer_bench.py --config "$large" --src_len "$src_len" --tgt_len "$tgt_len" \
    --steps "$steps" --warmup 1 --optim adafactor --max_memory_gib "$cap_gib" "$@" 2>"$out/hf-$label.err" |
    grep '^{' | python3 -c "import json,sys; [print(json.dumps({**json.loads(l), 'config': '$label'})) for l in sys.stdin]" \
    >>"$results" || { failures=$((failures + 1)); tail -20 "$out/hf-$label.err"; }
}
# The seed's configuration.
run_hf seed --batch 1 --accumulation "$seed_accumulation" --gradient_checkpointing
run_fitsum seed --batch 1 --gradient_accumulation_steps "$seed_accumulation" --gradient_checkpointing
# fitsum's planned configuration, the same for both.
hf_planned=$(echo "$planned" | sed 's/--gradient_accumulation_steps/--accumulation/')
run_hf planned $hf_planned
run_fitsum planned $planned

stage "summary"
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| config | impl | batch x accumulation | bf16 | samples/s | step s | peak allocated MiB | peak reserved MiB |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    if "error" in r:
        print(f"| {r['config']} | {r['impl']} | | | {r['error']} | | {r.get('peak_allocated_mib', 0):.0f} | "
              f"{r.get('peak_reserved_mib', 0):.0f} |")
        continue
    print(f"| {r['config']} | {r['impl']} | {r['batch']} x {r['gradient_accumulation_steps']} | {r.get('bf16')} | "
          f"{r['samples_per_s']:.2f} | {r['step_s_median']:.2f} | {r.get('peak_allocated_mib', 0):.0f} | "
          f"{r.get('peak_reserved_mib', 0):.0f} |")
PY
echo "gpu.sh: done, $failures failure(s); logs in $out"
exit $((failures > 0))
