#!/usr/bin/env bash
# Data-parallel training on CUDA, for bench/gpu.sh (or by hand on a GPU machine):
#     bash bench/gpu_data_parallel.sh FITSUM_BINARY FIXTURE_DIR WORK_DIR
# Trains the tiny fixture for 3 steps as 2 processes x accumulation 1 and as 1 process x accumulation 2 (the same
# examples per step) and checks that the logged losses and gradient norms agree within 1e-5 relative. With two GPUs
# or more each process takes its own (LOCAL_RANK) and the processes talk through NCCL (ddp_backend nccl, the CUDA
# default); with one, both share GPU 0 as if on two machines (LOCAL_RANK 0 each) through Gloo, since NCCL refuses
# two ranks on one device. Prints one line per run and the comparison; exits non-zero when any of it fails.
set -uo pipefail
fitsum=${1:?usage: gpu_data_parallel.sh FITSUM_BINARY FIXTURE_DIR WORK_DIR}
fixture=${2:?usage: gpu_data_parallel.sh FITSUM_BINARY FIXTURE_DIR WORK_DIR}
dir=${3:?usage: gpu_data_parallel.sh FITSUM_BINARY FIXTURE_DIR WORK_DIR}
python=${FITSUM_GPU_PYTHON:-python3}
mkdir -p "$dir"
rm -rf "$dir/one" "$dir/two"

# Eight pre-tokenized copy-task records (ids within the tiny fixture's vocabulary, eos last).
for i in 0 1 2 3 4 5 6 7; do
  printf '{"input_ids":[%d,%d,%d,%d,1],"labels":[%d,%d,%d,1]}\n' $((103 + i)) $((110 + 2 * i)) $((120 + i)) \
    $((150 - i)) $((130 + i)) $((140 + i)) $((160 - i))
done >"$dir/data.jsonl"

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
backend=gloo
((gpus >= 2)) && backend=nccl
common=(train --device cuda --model_name_or_path "$fixture" --train_file "$dir/data.jsonl"
  --per_device_train_batch_size 1 --max_steps 3 --logging_steps 1 --save_strategy no --optim adafactor
  --learning_rate 1e-3 --disable_tqdm)

"$fitsum" "${common[@]}" --output_dir "$dir/one" --gradient_accumulation_steps 2 >"$dir/one.log" 2>&1
status=$?
echo "  1 process x accumulation 2: exit $status"
((status == 0)) || { tail -n 3 "$dir/one.log"; exit 1; }

port=$((20000 + RANDOM % 20000))
pids=()
for rank in 0 1; do
  local_rank=$rank
  ((gpus < 2)) && local_rank=0
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$local_rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$fitsum" "${common[@]}" --output_dir "$dir/two" --ddp_backend "$backend" >"$dir/rank-$rank.log" 2>&1 &
  pids+=($!)
done
failed=0
for rank in 0 1; do
  wait "${pids[$rank]}"
  status=$?
  echo "  2 processes ($backend, $gpus GPU(s)), rank $rank: exit $status"
  ((status == 0)) || { tail -n 3 "$dir/rank-$rank.log"; failed=1; }
done
((failed == 0)) || exit 1

"$python" - "$dir/one/trainer_state.json" "$dir/two/trainer_state.json" <<'EOF'
import json, sys
one, two = (json.load(open(p))["log_history"] for p in sys.argv[1:3])
steps = [e for e in one if "grad_norm" in e], [e for e in two if "grad_norm" in e]
worst = 0.0
for a, b in zip(*steps):
    for key in ("loss", "grad_norm"):
        worst = max(worst, abs(a[key] - b[key]) / max(abs(a[key]), 1e-12))
ok = len(steps[0]) == len(steps[1]) == 3 and worst <= 1e-5
print(f"  losses and gradient norms of 3 steps: largest relative difference {worst:.2e} "
      f"({'within' if ok else 'NOT within'} 1e-5)")
sys.exit(0 if ok else 1)
EOF
