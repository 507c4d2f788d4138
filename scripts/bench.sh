#!/usr/bin/env bash
# `make bench`: fitsum's training step side by side with eager PyTorch on the same LibTorch (Debian's python3-torch),
# alternated in one run, with MFU against the matmul rate measured in the same run (bench/run_side_by_side.py);
# then the tokenizer's throughput. Prints tables; never fails on a speed. The HF Trainer joins with FITSUM_BENCH_HF
# (pip: PyTorch 2.x and the newest transformers, the baseline users install; debian: torch 1.13), whose venvs
# scripts/hf-venv.sh makes from PyPI when missing: `make bench` alone downloads nothing.
#
#   scripts/bench.sh [BUILD_DIR] [runner flags...]      e.g. scripts/bench.sh build --shapes small --rounds 3
#   FITSUM_BENCH_SHAPES=tiny,small,base,large scripts/bench.sh build --steps 2
#   FITSUM_BENCH_HF=pip,debian scripts/bench.sh build --shapes small --rounds 3
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${1:-build}"
shift || true
python=/usr/bin/python3
eager=../shared/reference/bench_eager.py

runner=(bench/run_side_by_side.py --fitsum "$build_dir/fitsum" --shapes "${FITSUM_BENCH_SHAPES:-tiny,small}")
if [[ ! -f "$eager" ]]; then
  echo "bench: $eager not found: timing fitsum alone" >&2
  runner+=(--no_eager)
elif ! "$python" -c "import torch" 2>/dev/null; then
  echo "bench: $python cannot import torch (FITSUM_WITH_PYTHON_BASELINE=1 make deps installs python3-torch):" \
       "timing fitsum alone" >&2
  runner+=(--no_eager)
else
  runner+=(--eager "$eager")
fi
if [[ -n "${FITSUM_BENCH_HF:-}" ]]; then
  IFS=, read -r -a hf_choices <<<"$FITSUM_BENCH_HF"
  for choice in "${hf_choices[@]}"; do runner+=(--hf "$choice" --build_dir "$build_dir"); done
else
  runner+=(--no_hf)
fi
echo "== training step: fitsum vs eager PyTorch (load average now: $(cut -d' ' -f1-3 /proc/loadavg)) =="
if command -v "$python" >/dev/null; then
  "$python" "${runner[@]}" "$@"
else
  echo "bench: $python not found; run $build_dir/fitsum bench train --shape small for fitsum alone" >&2
fi

echo
echo "== tokenization throughput =="
if [[ -x "$build_dir/bench/tokenize_throughput" ]]; then
  "$build_dir/bench/tokenize_throughput"
else
  echo "bench: $build_dir/bench/tokenize_throughput not built (FITSUM_BUILD_BENCH=OFF?)" >&2
fi
