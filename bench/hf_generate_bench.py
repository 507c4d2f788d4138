#!/usr/bin/env python3
"""HF generate() against `fitsum eval` on the same model folder and sources, beam search, side by side in one run.

The model is PEGASUS with random weights from a config (saved once with save_pretrained into --work), the sources
the first --samples SAMSum test dialogues tokenized to --max_source_length; every contender decodes them in batches
of --batch with --num_beams, --max_length, no loss pass. Random weights rarely pick eos, so every output runs to
max_length on both sides: the same work. The runs alternate (HF, fitsum, HF, fitsum, ...) for --rounds rounds; each
contender's time is the median of its rounds (HF: the generate() calls only; fitsum: eval_runtime, the generation
loop of `fitsum eval`, without loading). Both produce the same ids (checked).

HF runs on the stack users install today by default (`--hf pip`: PyTorch 2.x from PyPI and the newest transformers,
the venv `make test-hf HF_TORCH=pip` makes, made with scripts/hf-venv.sh when the build folder has none); `--hf
debian` takes Debian's torch 1.13 with transformers 4.47, and a path takes that Python. The script runs itself again
under the chosen Python, so any python3 can start it.

    python3 bench/hf_generate_bench.py --fitsum build/fitsum --config configs/pegasus-small/config.json \\
        --beams 4,8 --rounds 3
    python3 bench/hf_generate_bench.py --hf debian --beams 4,8 --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hf_python(choice, build_dir):
    """The Python of the HF side: a venv of scripts/hf-venv.sh (made when missing) or the path given."""
    if choice not in ("pip", "debian"):
        return choice
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", "hf-venv.sh"), build_dir, choice],
                            stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        sys.exit(f"hf_generate_bench: scripts/hf-venv.sh {build_dir} {choice} failed")
    return result.stdout.strip().splitlines()[-1]


def hf_run(model, batches, beams, max_length):
    start = time.perf_counter()
    outputs = []
    with torch.no_grad():
        for ids, mask in batches:
            out = model.generate(input_ids=ids, attention_mask=mask, num_beams=beams, max_length=max_length,
                                 min_length=0, length_penalty=1.0, early_stopping=False)
            outputs += [[t for t in row.tolist()] for row in out]
    return time.perf_counter() - start, outputs


def fitsum_run(a, folder, data, beams, work):
    metrics, predictions = os.path.join(work, "metrics.json"), os.path.join(work, "pred.jsonl")
    subprocess.run([a.fitsum, "eval", "--model", folder, "--test_file", data, "--no_loss",
                    "--per_device_eval_batch_size", str(a.batch), "--num_beams", str(beams), "--max_length",
                    str(a.max_length), "--min_length", "0", "--length_penalty", "1.0", "--early_stopping", "false",
                    "--max_source_length", str(a.max_source_length), "--max_eval_samples",
                    str(a.samples), "--metrics_file", metrics, "--predictions_file", predictions],
                   check=True, capture_output=True, text=True)
    with open(metrics) as f:
        runtime = json.load(f)["eval_runtime"]
    with open(predictions) as f:
        ids = [json.loads(line)["generated_ids"] for line in f]
    return runtime, ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fitsum", default=os.path.join(ROOT, "build", "fitsum"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "pegasus-small", "config.json"))
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "..", "shared", "data", "pegasus"))
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "samsum", "test.jsonl"))
    ap.add_argument("--work", default="/tmp/fitsum-hf-generate-bench")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--max_source_length", type=int, default=256)
    ap.add_argument("--max_length", type=int, default=32)
    ap.add_argument("--beams", default="4,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hf", default="pip", help="pip (the default), debian, or the path of a Python with transformers")
    ap.add_argument("--build_dir", default=os.path.join(ROOT, "build"), help="where --hf pip|debian's venvs live")
    a = ap.parse_args()
    python = hf_python(a.hf, a.build_dir)
    if os.environ.get("FITSUM_HF_GENERATE_BENCH_PYTHON") != python:
        os.environ["FITSUM_HF_GENERATE_BENCH_PYTHON"] = python
        os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])
    global torch
    import torch
    from transformers import PegasusConfig, PegasusForConditionalGeneration, PegasusTokenizer
    import transformers

    os.makedirs(a.work, exist_ok=True)
    folder = os.path.join(a.work, "model")
    torch.manual_seed(0)
    config = PegasusConfig.from_json_file(a.config)
    model = PegasusForConditionalGeneration(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer = PegasusTokenizer.from_pretrained(a.tokenizer)
    tokenizer.save_pretrained(folder)
    with open(a.data) as f:
        records = [json.loads(line) for line in f][:a.samples]
    data = os.path.join(a.work, "test.jsonl")
    with open(data, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    encoded = tokenizer([r["dialogue"] for r in records], max_length=a.max_source_length, truncation=True)
    batches = []
    for s in range(0, len(records), a.batch):
        chunk = {k: v[s:s + a.batch] for k, v in encoded.items()}
        padded = tokenizer.pad(chunk, return_tensors="pt")
        batches.append((padded["input_ids"], padded["attention_mask"]))

    loads, rows = [os.getloadavg()[0]], []
    for beams in (int(b) for b in a.beams.split(",")):
        times = {"hf": [], "fitsum": []}
        for r in range(a.rounds):
            hf_s, hf_ids = hf_run(model, batches, beams, a.max_length)
            fs_s, fs_ids = fitsum_run(a, folder, data, beams, a.work)
            strip = [[t for t in row] for row in hf_ids]
            same = all(h[:len(f)] == f and all(t == config.pad_token_id for t in h[len(f):])
                       for h, f in zip(strip, fs_ids))
            times["hf"].append(hf_s)
            times["fitsum"].append(fs_s)
            loads.append(os.getloadavg()[0])
            print(f"  beams {beams} round {r + 1}: hf {hf_s:.2f} s, fitsum {fs_s:.2f} s, same ids: {same}",
                  file=sys.stderr)
        hf_s, fs_s = statistics.median(times["hf"]), statistics.median(times["fitsum"])
        rows.append((beams, hf_s, fs_s, same))
    print(f"\n{config.d_model}-wide PEGASUS ({config.encoder_layers}+{config.decoder_layers} layers, vocab "
          f"{config.vocab_size}), {a.samples} SAMSum sources in batches of {a.batch}, max_length {a.max_length}, "
          f"torch {torch.__version__}, transformers {transformers.__version__}, intra-op threads {torch.get_num_threads()}; medians of {a.rounds} alternating "
          f"rounds; load average {min(loads):.1f}-{max(loads):.1f}\n")
    print("| num_beams | HF generate() s | fitsum eval s | speed-up | same ids |")
    print("|---|---|---|---|---|")
    for beams, hf_s, fs_s, same in rows:
        print(f"| {beams} | {hf_s:.2f} | {fs_s:.2f} | {hf_s / fs_s:.2f}x | {same} |")


if __name__ == "__main__":
    main()
