#!/usr/bin/env bash
# The quick-start demo: what fitsum knows about a model before training, and a forward pass of a small randomly
# initialised PEGASUS. Grows with the project into the full story (plan, train under a budget, evaluate, summarize).
set -euo pipefail
build=${1:-build}
fitsum="$build/fitsum"
cd "$(dirname "$0")/.."

echo "== 1. The model people fine-tune (google/pegasus-cnn_dailymail shape): where the memory goes"
"$fitsum" info --model data/pegasus
echo
echo "== 2. A small PEGASUS with random weights: load, validate, one forward pass"
"$fitsum" info --model configs/pegasus-small --forward
echo
echo "== 3. Plan training in 200 MiB: every configuration's predicted peak and speed, the fastest that fits"
"$fitsum" plan --config_name configs/pegasus-tiny --device cpu \
  --config_overrides vocab_size=8000,d_model=256,encoder_layers=4,decoder_layers=4,encoder_ffn_dim=1024,decoder_ffn_dim=1024 \
  --max_source_length 256 --max_target_length 64 --per_device_train_batch_size 8 --max_memory 200MiB
