#!/usr/bin/python3
"""Expected gradients with Hugging Face's embedding semantics, for the fixtures' batch.

HF builds model.shared as nn.Embedding(vocab, d_model, padding_idx=pad_token_id): lookups of the pad token (the
decoder start token, and padding) add no gradient to that row; it learns only through the tied LM head. The plain
reference (../shared/reference/pegasus_ref.py) that computed case.json looks embeddings up without padding_idx, so
its gradient of row 0 includes those lookups. This script recomputes the fixture batch's gradients with padding_idx,
using the same reference code otherwise, and writes hf_padding.json beside case.json.

    /usr/bin/python3 tests/data/make_hf_padding_case.py ../shared/fixtures/tiny-pegasus tests/data/fixtures/tiny-pegasus
    /usr/bin/python3 tests/data/make_hf_padding_case.py tests/data/fixtures/odd-pegasus tests/data/fixtures/odd-pegasus
(run from the project root, with ../shared/reference beside it; Debian's python3-torch)
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "..", "shared", "reference"))
import pegasus_ref as R  # noqa: E402


def sample(t):
    flat = t.reshape(-1)
    idx = list(range(0, flat.numel(), max(1, flat.numel() // 16)))[:16]
    return {"index": idx, "value": [float(flat[i]) for i in idx], "sum": float(flat.double().sum()),
            "l2": float(flat.double().norm())}


def main(fixture_dir, out_dir):
    case = json.load(open(os.path.join(fixture_dir, "case.json")))
    c = json.load(open(os.path.join(fixture_dir, "config.json")))
    w = R.load_safetensors(os.path.join(fixture_dir, "model.safetensors"))
    for tied in ("lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
        w.pop(tied, None)
    params = {k: v.clone().requires_grad_(R.is_trainable(k)) for k, v in w.items()}
    ref = R.Ref(c, params)
    pad = c["pad_token_id"]

    def embed(ids, side, start=0):
        scale = math.sqrt(c["d_model"]) if c["scale_embedding"] else 1.0
        x = F.embedding(ids, params["model.shared.weight"], padding_idx=pad) * scale
        return x + params[f"model.{side}.embed_positions.weight"][start:start + ids.shape[1]]

    ref.embed = embed
    src = torch.tensor(case["input_ids"])
    am = torch.tensor(case["attention_mask"])
    lab = torch.tensor(case["labels"])
    logits = ref.decode(R.shift_right(lab), ref.encode(src, am), am)
    loss = F.cross_entropy(logits.reshape(-1, c["vocab_size"]), lab.reshape(-1), ignore_index=-100)
    loss.backward()
    trainable = [k for k in params if R.is_trainable(k)]
    out = {
        "about": "case.json's batch with HF embedding semantics (padding_idx = pad_token_id); "
                 "made by tests/data/make_hf_padding_case.py",
        "loss": loss.item(),
        "grads": {k: sample(params[k].grad) for k in case["grads"]},
        "grad_global_l2": float(torch.sqrt(sum((params[k].grad.double() ** 2).sum() for k in trainable))),
    }
    with open(os.path.join(out_dir, "hf_padding.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(out_dir, "loss", out["loss"], "grad_global_l2", out["grad_global_l2"])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
