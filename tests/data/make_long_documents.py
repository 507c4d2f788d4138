#!/usr/bin/env python3
"""Long documents for long-input tests and benchmarks, built from SAMSum alone: no download.

Each document is consecutive SAMSum dialogues joined by a blank line, just long enough to reach its target length in
PEGASUS tokens (the real `spiece.model` of ../shared/data/pegasus, counted by `fitsum tokenize`, `</s>` included);
its summary is the dialogues' summaries joined by spaces. Documents of one target take disjoint runs of dialogues,
the next target starts where the last one stopped, so the output is the same on every machine.

    python3 tests/data/make_long_documents.py --fitsum build/fitsum --lengths 4096,16384 --per_length 4 \\
        --output /tmp/samsum-long.jsonl

Prints one line per document (id, dialogues, tokens). Records: {"id", "dialogue", "summary", "source_tokens"}.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(ROOT, "..", "shared", "data")
SEPARATOR = "\n\n"


def tokenizer_folder(work, tokenizer):
    """A folder with PEGASUS's tokenizer files and a config.json whose positions do not clamp the count."""
    folder = os.path.join(work, "tokenizer")
    os.makedirs(folder)
    for name in ("spiece.model", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(tokenizer, name)):
            shutil.copy(os.path.join(tokenizer, name), folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "pegasus", "vocab_size": 96103, "max_position_embeddings": 1 << 20}, f)
    return folder


def token_counts(fitsum, folder, texts, work):
    """The PEGASUS token count of each text, </s> included, as `fitsum tokenize` counts it."""
    source, ids = os.path.join(work, "texts.jsonl"), os.path.join(work, "ids.jsonl")
    with open(source, "w") as f:
        for text in texts:
            f.write(json.dumps({"dialogue": text, "summary": "x"}) + "\n")
    result = subprocess.run([fitsum, "tokenize", "--model", folder, "--input_file", source, "--output_file", ids,
                             "--max_source_length", str(1 << 20)], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"make_long_documents: fitsum tokenize failed:\n{result.stderr[-2000:]}")
    with open(ids) as f:
        counts = [len(json.loads(line)["input_ids"]) for line in f]
    os.remove(ids)
    return counts


def build(records, lengths, per_length, fitsum, folder, work):
    """Greedy runs of dialogues whose estimated length reaches the target, then measured and extended if short."""
    counts = token_counts(fitsum, folder, [r["dialogue"] for r in records], work)
    documents, start = [], 0
    for target in lengths:
        for index in range(per_length):
            end, estimate = start, 1  # each dialogue adds its pieces without its own </s>; the document has one
            while estimate < target:
                if end == len(records):
                    sys.exit(f"make_long_documents: SAMSum ran out of dialogues at target {target}")
                estimate += counts[end] - 1
                end += 1
            while True:
                text = SEPARATOR.join(records[i]["dialogue"] for i in range(start, end))
                measured = token_counts(fitsum, folder, [text], work)[0]
                if measured >= target or end == len(records):
                    break
                end += 1
            summary = " ".join(records[i]["summary"].strip() for i in range(start, end))
            documents.append({"id": f"samsum-long-{target}-{index}", "dialogue": text, "summary": summary,
                              "source_tokens": measured})
            print(f"{documents[-1]['id']}: dialogues {start}-{end - 1}, {measured} tokens")
            start = end
    return documents


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fitsum", default=os.path.join(ROOT, "build", "fitsum"))
    ap.add_argument("--samsum", default=os.path.join(SHARED, "samsum", "train.jsonl"))
    ap.add_argument("--tokenizer", default=os.path.join(SHARED, "pegasus"), help="a folder with spiece.model")
    ap.add_argument("--lengths", default="4096,16384", help="target lengths in tokens, comma-separated")
    ap.add_argument("--per_length", type=int, default=4, help="documents per target length")
    ap.add_argument("--output", required=True, help="the JSON Lines file to write")
    a = ap.parse_args()
    lengths = [int(n) for n in a.lengths.split(",")]
    if any(n < 2 for n in lengths) or a.per_length < 1:
        sys.exit("make_long_documents: --lengths must be at least 2 tokens and --per_length at least 1")
    with open(a.samsum) as f:
        records = [r for r in (json.loads(line) for line in f) if r["dialogue"].strip()]
    # Enough dialogues for every target (SAMSum's average is about 150 PEGASUS tokens), with a margin.
    records = records[:min(len(records), sum(lengths) * a.per_length // 40 + 100)]
    with tempfile.TemporaryDirectory() as work:
        documents = build(records, lengths, a.per_length, a.fitsum, tokenizer_folder(work, a.tokenizer), work)
    partial = a.output + ".partial"
    with open(partial, "w", encoding="utf-8") as f:
        for d in documents:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    os.replace(partial, a.output)


if __name__ == "__main__":
    main()
