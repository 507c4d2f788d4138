#!/usr/bin/env bash
# Data-parallel speed on one machine: the same optimizer steps (same examples, same weights at the end) trained by
# 1 process and by N processes (torchrun's variables, 127.0.0.1), each process with one LibTorch and one BLAS
# thread, alternating in one run. Prints train_tokens_per_second of each and the ratio; with --zero 1 or 2, also the N
# processes with ZeRO stage 1 (optimizer state sharded) or 2 (gradients too), its ratio to stage 0, and the largest
# peak resident set of the processes (GNU time's %M: Debian package time) with stage 0 and with that stage. With
# --overlap, also the N processes with one bucket of gradients (--ddp_bucket_cap_mb 1048576: the sum starts when the
# backward ends, as if not overlapped) and the ratio of the default buckets (summed during the backward) to it.
#   bash bench/data_parallel.sh [--fitsum build/fitsum] [--processes 2] [--rounds 2] [--steps 6] [--batch 2]
#        [--config configs/pegasus-tiny] [--overrides d_model=256,...] [--src_len 128] [--tgt_len 32]
#        [--optim adafactor] [--zero 0|1|2] [--accumulation 1 (per process)] [--overlap]
set -euo pipefail
fitsum=build/fitsum processes=2 rounds=2 steps=6 batch=2 src_len=128 tgt_len=32 optim=adafactor zero=0 accumulation=1
overlap=0
config=configs/pegasus-tiny
overrides="vocab_size=8000,d_model=256,encoder_layers=2,decoder_layers=2,encoder_ffn_dim=1024,decoder_ffn_dim=1024"
while (($#)); do
  if [ "$1" = --overlap ]; then overlap=1; shift; continue; fi
  case $1 in
    --fitsum) fitsum=$2 ;; --processes) processes=$2 ;; --rounds) rounds=$2 ;; --steps) steps=$2 ;;
    --batch) batch=$2 ;; --config) config=$2 ;; --overrides) overrides=$2 ;; --src_len) src_len=$2 ;;
    --tgt_len) tgt_len=$2 ;; --optim) optim=$2 ;; --zero) zero=$2 ;; --accumulation) accumulation=$2 ;;
    *) echo "data_parallel.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Records of exactly src_len / tgt_len tokens (every batch the same shape), enough for the steps.
python3 - "$work/data.jsonl" "$((steps * batch * processes * accumulation * 2))" "$src_len" "$tgt_len" <<'PY'
import json, sys
path, count, src, tgt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with open(path, "w") as f:
    for i in range(count):
        ids = [103 + (i * 13 + j * 7) % 7000 for j in range(src - 1)] + [1]
        labels = [103 + (i * 11 + j * 5) % 7000 for j in range(tgt - 1)] + [1]
        f.write(json.dumps({"input_ids": ids, "labels": labels}) + "\n")
PY
common=(train --config_name "$config" --config_overrides "dropout=0.0,attention_dropout=0.0,$overrides"
  --train_file "$work/data.jsonl" --max_source_length "$src_len" --max_target_length "$tgt_len"
  --per_device_train_batch_size "$batch" --max_steps "$steps" --save_strategy no --logging_steps "$steps"
  --optim "$optim" --num_threads 1 --blas_threads 1 --overwrite_output_dir --disable_tqdm)
rate() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["train_tokens_per_second"])' "$1/train_results.json"; }
peak() {  # MiB, the largest peak resident set of the processes of a run
  cat "$1".rank-*.rss | sort -n | tail -1 | awk '{print $1 / 1024}'
}
many_run() {  # $1: output folder, then extra flags
  local out=$1 port=$((20000 + RANDOM % 20000)) pids=()
  shift
  for rank in $(seq 0 $((processes - 1))); do
    RANK=$rank WORLD_SIZE=$processes LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      /usr/bin/time -f %M -o "$out.rank-$rank.rss" \
      "$fitsum" "${common[@]}" --gradient_accumulation_steps "$accumulation" --output_dir "$out" "$@" \
      >"$out.rank-$rank.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
}
columns="| round | 1 process, accumulation $((processes * accumulation)) (tokens/s) | $processes processes (tokens/s) | ratio |"
rule="|---|---|---|---|"
if [ "$zero" != 0 ]; then
  columns+=" $processes processes, ZeRO $zero (tokens/s) | ZeRO $zero / ZeRO 0 | peak RSS, ZeRO 0 | peak RSS, ZeRO $zero |"
  rule+="---|---|---|---|"
fi
if [ "$overlap" = 1 ]; then
  columns+=" $processes processes, one bucket (tokens/s) | buckets / one bucket |"
  rule+="---|---|"
fi
echo "$columns"
echo "$rule"
for round in $(seq 1 "$rounds"); do
  "$fitsum" "${common[@]}" --gradient_accumulation_steps "$((processes * accumulation))" --output_dir "$work/one" \
    >"$work/one.log" 2>&1
  many_run "$work/many"
  one=$(rate "$work/one")
  many=$(rate "$work/many")
  row=$(python3 -c 'import sys; r, a, b = sys.argv[1:]; print(f"| {r} | {float(a):.1f} | {float(b):.1f} | {float(b) / float(a):.2f}x |", end="")' \
    "$round" "$one" "$many")
  if [ "$zero" != 0 ]; then
    many_run "$work/sharded" --zero_stage "$zero"
    sharded=$(rate "$work/sharded")
    row+=$(python3 -c 'import sys; b, c, p, q = map(float, sys.argv[1:]); print(f" {c:.1f} | {c / b:.2f}x | {p:.1f} MiB | {q:.1f} MiB |", end="")' \
      "$many" "$sharded" "$(peak "$work/many")" "$(peak "$work/sharded")")
  fi
  if [ "$overlap" = 1 ]; then
    many_run "$work/whole" --ddp_bucket_cap_mb 1048576
    whole=$(rate "$work/whole")
    row+=$(python3 -c 'import sys; b, w = map(float, sys.argv[1:]); print(f" {w:.1f} | {b / w:.2f}x |", end="")' \
      "$many" "$whole")
  fi
  echo "$row"
done
