#!/usr/bin/env bash
# The quick-start demo: what fitsum knows about a model before training, a memory plan, then a small PEGASUS trained
# from random weights on the bundled SAMSum sample under a memory budget, evaluated with ROUGE, and used to summarize;
# then the same commands on a small BART. (A randomly initialised model trained for a minute on a laptop CPU writes
# poor summaries: the point is the pipeline, not the scores.)
set -euo pipefail
build=${1:-build}
fitsum="$PWD/$build/fitsum"
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== 1. The model people fine-tune (google/pegasus-cnn_dailymail shape): where the memory goes"
"$fitsum" info --model data/pegasus
echo
echo "== 2. Plan training in 200 MiB: every configuration's predicted peak and speed, the fastest that fits"
"$fitsum" plan --config_name configs/pegasus-tiny --device cpu \
  --config_overrides vocab_size=8000,d_model=256,encoder_layers=4,decoder_layers=4,encoder_ffn_dim=1024,decoder_ffn_dim=1024 \
  --max_source_length 256 --max_target_length 64 --per_device_train_batch_size 8 --max_memory 200MiB
echo
echo "== 3. Train a small PEGASUS (random init, real tokenizer) on 300 SAMSum dialogues for 40 steps in 300 MiB:"
echo "      effective batch 8; the planner picks micro-batch, accumulation, checkpointing and optimizer"
"$fitsum" train --config_name configs/pegasus-tiny --tokenizer_name data/pegasus \
  --train_file data/samsum/train.jsonl --validation_file data/samsum/validation.jsonl --max_eval_samples 20 \
  --max_source_length 256 --max_target_length 64 --per_device_train_batch_size 8 --max_memory 300MiB \
  --max_steps 40 --learning_rate 1e-3 --warmup_steps 5 --logging_steps 10 \
  --evaluation_strategy steps --eval_steps 20 --save_strategy no --output_dir "$out/model"
echo
echo "== 4. Evaluate on 10 test dialogues (beam search, ROUGE)"
"$fitsum" eval --model "$out/model" --test_file data/samsum/test.jsonl --max_eval_samples 10 \
  --num_beams 4 --max_length 32 --min_length 5 --no_repeat_ngram_size 3 --max_source_length 256
echo
echo "== 5. Summarize dialogues from stdin"
printf 'Amanda: I baked cookies. Do you want some?\nJerry: Sure!\nAmanda: I will bring you tomorrow :-)\n\nOlivia: Who are you voting for in this election?\nOliver: Liberals as always.\n' |
  "$fitsum" summarize --model "$out/model" --num_beams 4 --max_length 32 --no_repeat_ngram_size 3
echo
echo "== 6. The same on BART: bart-base's layout (post-LayerNorm, learned positions) at a small size, GPT-2's byte-level"
echo "      BPE; trained in 300 MiB, evaluated, and summarizing stdin"
"$fitsum" train --config_name configs/bart-base --tokenizer_name data/gpt2 \
  --config_overrides d_model=128,encoder_layers=2,decoder_layers=2,encoder_ffn_dim=512,decoder_ffn_dim=512,encoder_attention_heads=4,decoder_attention_heads=4 \
  --train_file data/samsum/train.jsonl --max_source_length 256 --max_target_length 64 \
  --per_device_train_batch_size 8 --max_memory 300MiB --max_steps 40 --learning_rate 1e-3 --warmup_steps 5 \
  --logging_steps 10 --save_strategy no --output_dir "$out/bart"
"$fitsum" eval --model "$out/bart" --test_file data/samsum/test.jsonl --max_eval_samples 10 --num_beams 4 \
  --max_length 32 --max_source_length 256
printf 'Amanda: I baked cookies. Do you want some?\nJerry: Sure!\nAmanda: I will bring you tomorrow :-)\n' |
  "$fitsum" summarize --model "$out/bart" --num_beams 4 --max_length 32
