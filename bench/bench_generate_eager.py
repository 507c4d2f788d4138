#!/usr/bin/python3
"""Eager baseline for bench_generate: beam search with the plain PyTorch reference
(../shared/reference/pegasus_ref.py `beam_search`: HF generate() semantics, early_stopping=False, forced eos,
no key/value cache, the LM head over every position at every step), on the checkpoint and sources that
bench_generate uses. Prints one JSON line with the same fields.

    /usr/bin/python3 bench/bench_generate_eager.py --model DIR [--batch 4 --src_len 64 --num_beams 8 \
        --max_length 32 --min_length 0 --length_penalty 1.0 --repeats 3 --threads 1]

DIR: a folder with config.json and model.safetensors (F32), e.g. one written by
`build/bench/bench_generate --save_model DIR`. Runs on Debian's python3-torch.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))


def make_sources(batch, src_len, vocab):
    """The recipe of bench_generate.cpp's make_sources, step for step."""
    ids = torch.zeros(batch, src_len, dtype=torch.long)
    mask = torch.zeros(batch, src_len, dtype=torch.long)
    low = 103 if vocab > 104 else 2
    state = 12345
    for i in range(batch):
        length = max(2, src_len - (i % 4) * (src_len // 8))
        for j in range(length):
            state = (1103515245 * state + 12345) % 2147483648
            ids[i, j] = 1 if j + 1 == length else low + (state >> 8) % (vocab - low)
            mask[i, j] = 1
    return ids, mask


def generated_tokens(seqs, eos=1):
    total = 0
    for row in seqs.tolist():
        t = 1
        while t < len(row) and row[t] != eos:
            t += 1
        total += min(t, len(row) - 1)
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--reference", default=os.path.join(here, "..", "..", "shared", "reference"),
                    help="folder holding pegasus_ref.py (default: ../shared/reference beside the project)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--src_len", type=int, default=64)
    ap.add_argument("--num_beams", type=int, default=8)
    ap.add_argument("--max_length", type=int, default=32)
    ap.add_argument("--min_length", type=int, default=0)
    ap.add_argument("--length_penalty", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.reference))
    import pegasus_ref as R

    torch.set_num_threads(a.threads)
    c = json.load(open(os.path.join(a.model, "config.json")))
    c.setdefault("scale_embedding", False)
    c.setdefault("activation_function", "gelu")
    w = R.load_safetensors(os.path.join(a.model, "model.safetensors"))
    for side in ("encoder", "decoder"):
        w.setdefault(f"model.{side}.embed_positions.weight", R.sinusoid(c["max_position_embeddings"], c["d_model"]))
    w.setdefault("final_logits_bias", torch.zeros(1, c["vocab_size"]))
    ref = R.Ref(c, w)
    ids, mask = make_sources(a.batch, a.src_len, c["vocab_size"])

    def run():
        with torch.no_grad():
            return R.beam_search(ref, ids, mask, num_beams=a.num_beams, max_len=a.max_length,
                                 length_penalty=a.length_penalty, min_len=a.min_length)

    seqs, _ = run()  # warm-up
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        seqs, _ = run()
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    tokens = generated_tokens(seqs)
    checksum = int((seqs * torch.arange(1, seqs.shape[1] + 1)).sum())
    print(json.dumps({"impl": "eager-reference", "use_cache": False, "batch": a.batch, "src_len": a.src_len,
                      "num_beams": a.num_beams, "max_length": a.max_length, "threads": a.threads,
                      "seconds": median, "summaries_per_s": a.batch / median, "tokens_per_s": tokens / median,
                      "generated_tokens": tokens, "checksum": checksum}))


if __name__ == "__main__":
    main()
