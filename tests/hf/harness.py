"""Shared helpers of the live Hugging Face comparisons (make test-hf): where fitsum's binaries are, how to run them,
how to save a random model as an HF folder, and relative comparisons. Paths come from CTest's environment."""
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

BINARY = os.environ.get("FITSUM_BINARY", "")
PROBE = os.environ.get("FITSUM_HF_PROBE", "")
SHARED = os.environ.get("FITSUM_SHARED_DIR", "")
SOURCE = os.environ.get("FITSUM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
HF_TORCH = os.environ.get("FITSUM_HF_TORCH", "debian")

sys.path.insert(0, os.path.dirname(__file__))
from families import FAMILIES  # noqa: E402


def run(args, **kwargs):
    """Runs a fitsum program; a failure shows its stderr."""
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} exited {result.returncode}:\n{result.stderr[-4000:]}")
    return result


def fitsum(*args, **kwargs):
    return run([BINARY, *args], **kwargs)


def probe(*args):
    return run([PROBE, *args])


def shared_path(*parts):
    path = os.path.join(SHARED, *parts)
    if not SHARED or not os.path.exists(path):
        pytest.skip(f"the shared reference folder is absent ({path})")
    return path


def save_model(model, folder):
    """save_pretrained, as users' checkpoints are written (safetensors, tied copies dropped)."""
    model.save_pretrained(folder, safe_serialization=True)
    return str(folder)


def save_batch(path, **tensors):
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    return str(path)


def rms(t):
    t = t.double()
    return float(t.pow(2).mean().sqrt()) if t.numel() else 0.0


def assert_close(got, want, rel, what):
    """Every entry within rel x the reference tensor's RMS (fixtures README), or rel x |want| for scalars."""
    got = torch.as_tensor(got, dtype=torch.float64)
    want = torch.as_tensor(want, dtype=torch.float64)
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    scale = rms(want) if want.numel() > 1 else abs(float(want))
    worst = float((got - want).abs().max()) if want.numel() else 0.0
    assert worst <= rel * scale, f"{what}: max |fitsum - hf| = {worst:.3e} > {rel:g} x {scale:.3e}"


def read_json(path):
    with open(path) as f:
        return json.load(f)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return str(path)







__all__ = ["run", "fitsum", "probe", "save_model", "save_batch", "assert_close", "rms", "read_json", "read_jsonl",
           "write_jsonl", "shared_path", "load_file", "HF_TORCH", "FAMILIES"]
