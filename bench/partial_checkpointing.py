#!/usr/bin/env python3
"""Per-layer activation checkpointing against checkpointing every layer, measured in one run.

1. `fitsum plan` (JSON) with the micro-batch and optimizer fixed and a large budget: the predicted peaks without
   checkpointing and with every layer checkpointed.
2. A budget halfway between the two: the planner must choose a partial set of checkpointed layers.
3. `fitsum bench train` of that partial set and of every layer, at the same micro-batch, alternating, `--rounds`
   times; prints both medians and the ratio (partial / all tokens per second), with the peaks measured by the
   tracking allocator against the budget.

    python3 bench/partial_checkpointing.py --fitsum build/fitsum [--shape small] [--batch 4] [--src_len 512]
"""
import argparse
import json
import statistics
import subprocess
import sys


def run_json(cmd):
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fitsum", default="build/fitsum")
    ap.add_argument("--config_name", default="configs/pegasus-small/config.json")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--src_len", type=int, default=512)
    ap.add_argument("--tgt_len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    model = ["--config_name", a.config_name]
    fixed = ["--per_device_train_batch_size", str(a.batch), "--gradient_accumulation_steps", "1", "--no_resplit",
             "--optim", "adafactor", "--max_source_length", str(a.src_len), "--max_target_length", str(a.tgt_len),
             "--format", "json"]
    wide = run_json([a.fitsum, "plan", *model, *fixed, "--max_memory", "1TiB"])
    peaks = {}
    for c in wide["candidates"]:
        enc, dec = c["gradient_checkpointing_encoder_layers"], c["gradient_checkpointing_decoder_layers"]
        peaks["none" if enc == 0 and dec == 0 else "all"] = c["predicted_peak_bytes"]
    budget = int((peaks["none"] + peaks["all"]) / 2 * 1.05)
    plan = run_json([a.fitsum, "plan", *model, *fixed, "--max_memory", str(budget)])
    chosen = plan["chosen"]
    if chosen is None:
        sys.exit("no plan fits the halfway budget")
    enc, dec = chosen["gradient_checkpointing_encoder_layers"], chosen["gradient_checkpointing_decoder_layers"]
    all_layers = max(c["gradient_checkpointing_encoder_layers"] for c in plan["candidates"])
    print(f"budget {budget / 2**20:.1f} MiB (halfway between no checkpointing, {peaks['none'] / 2**20:.1f} MiB, "
          f"and all, {peaks['all'] / 2**20:.1f} MiB, plus the margin): planner chose {enc} encoder + {dec} decoder "
          f"layers, predicted peak {chosen['predicted_peak_bytes'] / 2**20:.1f} MiB")
    if (enc, dec) == (0, 0) or enc >= all_layers and dec >= all_layers:
        sys.exit("the planner did not choose a partial set")

    def bench(extra):
        out = run_json([a.fitsum, "bench", "train", *model, "--batch", str(a.batch), "--src_len", str(a.src_len),
                        "--tgt_len", str(a.tgt_len), "--optim", "adafactor", "--steps", str(a.steps),
                        "--max_memory", str(budget), "--gradient_checkpointing", *extra])
        return out["tokens_per_s"], out["peak_tracked_mib"]

    partial, every = [], []
    for _ in range(a.rounds):
        partial.append(bench(["--gradient_checkpointing_encoder_layers", str(enc),
                              "--gradient_checkpointing_decoder_layers", str(dec)]))
        every.append(bench([]))
    p = statistics.median(t for t, _ in partial)
    e = statistics.median(t for t, _ in every)
    print(f"partial ({enc}+{dec}): {p:.1f} tokens/s, peak {max(m for _, m in partial):.1f} MiB")
    print(f"all layers:   {e:.1f} tokens/s, peak {max(m for _, m in every):.1f} MiB")
    print(f"ratio partial / all: {p / e:.3f}")


if __name__ == "__main__":
    main()
