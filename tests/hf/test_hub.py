"""Hub ids against the real huggingface_hub (and transformers, when installed) over the local test Hub
(tests/support/hub_server.h as the program fitsum_hub_test_server): the cache huggingface_hub writes is the one
fitsum writes for the same responses (and the tree kept in tests/data/hub/, which the default suite compares
fitsum's against), and fitsum trains offline from a cache that huggingface_hub or transformers populated.

Needs only huggingface_hub and pytest (torch and transformers are used when present). FITSUM_WRITE_HUB_FIXTURE=1
rewrites the kept tree from huggingface_hub's download.
"""
import hashlib
import os
import subprocess
import sys

import pytest

BINARY = os.environ.get("FITSUM_BINARY", "")
SERVER = os.environ.get("FITSUM_HUB_SERVER", "")
SHARED = os.environ.get("FITSUM_SHARED_DIR", "")
SOURCE = os.environ.get("FITSUM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
REPO_ID = "google/pegasus-cnn_dailymail"
COMMIT = "5d4b5b8f1e2a0c7d9e6f3a2b1c0d9e8f7a6b5c4d"  # the server's default, and hub_test.cpp's
FIXTURE = os.path.join(SOURCE, "tests", "data", "hub", "pegasus-tiny-download.tree")
# What `fitsum download` asks for, in its order (io/hub.cpp: config, generation config, weights, tokenizer files).
DOWNLOAD_FILES = ["config.json", "generation_config.json", "model.safetensors", "spiece.model", "tokenizer.json",
                  "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"]


def cache_tree(root):
    """One line per entry, sorted: 'dir/', 'link -> target', 'file <size> <sha256[:12]>' (hub_test.cpp's format)."""
    lines = []
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if os.path.islink(path):
                lines.append(f"{rel} -> {os.readlink(path)}")
            elif os.path.isdir(path):
                lines.append(f"{rel}/")
            else:
                with open(path, "rb") as f:
                    data = f.read()
                lines.append(f"{rel} {len(data)} {hashlib.sha256(data).hexdigest()[:12]}")
    return "".join(line + "\n" for line in sorted(lines))


@pytest.fixture(scope="module")
def hub():
    """The test Hub serving ../shared/data/pegasus-tiny as google/pegasus-cnn_dailymail; its endpoint."""
    folder = os.path.join(SHARED, "data", "pegasus-tiny")
    if not (BINARY and SERVER and os.path.isdir(folder)):
        pytest.skip("needs FITSUM_BINARY, FITSUM_HUB_SERVER and the shared pegasus-tiny (run through make test-hf)")
    server = subprocess.Popen([SERVER, "--repo", f"{REPO_ID}={folder}", "--commit", COMMIT],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    endpoint = server.stdout.readline().strip()
    yield endpoint
    server.stdin.close()
    server.wait(timeout=30)


def without_tag(tree):
    """The tree without its CACHEDIR.TAG line (huggingface_hub writes the tag since 1.x)."""
    return "".join(line + "\n" for line in tree.splitlines() if not line.startswith("CACHEDIR.TAG "))


def hf_environment(home, endpoint, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(home), HF_ENDPOINT=endpoint, HF_HUB_DISABLE_TELEMETRY="1", **extra)
    return env


def run_python(code, env):
    """Runs `code` in a fresh interpreter: huggingface_hub reads its environment when it is imported."""
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def hf_download(home, endpoint):
    code = f"""
from huggingface_hub import hf_hub_download
from huggingface_hub.utils import EntryNotFoundError
for name in {DOWNLOAD_FILES!r}:
    try:
        hf_hub_download({REPO_ID!r}, name)
    except EntryNotFoundError:
        pass
"""
    run_python(code, hf_environment(home, endpoint))


def fitsum(*args, env):
    result = subprocess.run([BINARY, *map(str, args)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"fitsum {' '.join(map(str, args))}:\n{result.stdout[-2000:]}{result.stderr[-4000:]}"
    return result


def test_the_cache_layout_equals_huggingface_hubs(hub, tmp_path):
    hf_download(tmp_path / "hf", hub)
    hf_tree = cache_tree(tmp_path / "hf" / "hub")
    if os.environ.get("FITSUM_WRITE_HUB_FIXTURE") == "1":
        os.makedirs(os.path.dirname(FIXTURE), exist_ok=True)
        with open(FIXTURE, "w") as f:
            f.write(hf_tree)
    fitsum("download", REPO_ID, env=hf_environment(tmp_path / "fitsum", hub))
    fitsum_tree = cache_tree(tmp_path / "fitsum" / "hub")
    # huggingface_hub 2.x tags the cache folder (CACHEDIR.TAG) and fitsum does as the newest does; 0.27 wrote no
    # tag, so with it the tag alone may differ, and where both wrote one it is the same bytes.
    assert without_tag(fitsum_tree) == without_tag(hf_tree)
    assert "CACHEDIR.TAG " in fitsum_tree
    if "CACHEDIR.TAG " in hf_tree:
        assert fitsum_tree == hf_tree
    with open(FIXTURE) as f:
        kept = f.read()
    assert without_tag(kept) == without_tag(hf_tree), "the kept tree is not what huggingface_hub writes: FITSUM_WRITE_HUB_FIXTURE=1"


def test_each_tool_reuses_the_others_download(hub, tmp_path):
    fitsum("download", REPO_ID, env=hf_environment(tmp_path, hub))
    before = cache_tree(tmp_path / "hub")
    hf_download(tmp_path, hub)  # finds every file: nothing is added or replaced
    assert cache_tree(tmp_path / "hub") == before
    code = f"""
from huggingface_hub import hf_hub_download
print(hf_hub_download({REPO_ID!r}, "model.safetensors"))
"""
    path = run_python(code, hf_environment(tmp_path, "http://127.0.0.1:9", HF_HUB_OFFLINE="1")).strip()
    assert path == str(tmp_path / "hub" / "models--google--pegasus-cnn_dailymail" / "snapshots" / COMMIT /
                       "model.safetensors")


def copy_task_records(path):
    with open(path, "w") as f:
        for i in range(8):
            ids = [103 + (i * 13 + j * 7) % 64 for j in range(3 + i)] + [1]
            labels = [103 + (i * 11 + j * 5) % 64 for j in range(2 + i)] + [1]
            f.write(f'{{"input_ids": {ids}, "labels": {labels}}}\n')
    return path


def test_fitsum_trains_offline_from_a_cache_huggingface_hub_populated(hub, tmp_path):
    hf_download(tmp_path, hub)
    records = copy_task_records(tmp_path / "records.jsonl")
    out = tmp_path / "out"
    env = hf_environment(tmp_path, "http://127.0.0.1:9", HF_HUB_OFFLINE="1")  # nothing may be fetched
    result = fitsum("train", "--model_name_or_path", REPO_ID, "--train_file", records, "--output_dir", out,
                    "--max_steps", "1", "--per_device_train_batch_size", "2", env=env)
    assert f"pretrained weights from {REPO_ID}" in result.stdout
    assert (out / "model.safetensors").is_file()


def test_fitsum_trains_from_what_transformers_downloaded(hub, tmp_path):
    transformers = pytest.importorskip("transformers")
    code = f"""
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
AutoTokenizer.from_pretrained({REPO_ID!r})
AutoModelForSeq2SeqLM.from_pretrained({REPO_ID!r})
"""
    run_python(code, hf_environment(tmp_path, hub))
    records = copy_task_records(tmp_path / "records.jsonl")
    env = hf_environment(tmp_path, "http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    fitsum("train", "--model_name_or_path", REPO_ID, "--train_file", records, "--output_dir", tmp_path / "out",
           "--max_steps", "1", env=env)
    assert (tmp_path / "out" / "model.safetensors").is_file(), transformers.__version__
