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
