"""The same run as transformers, step for step: `fitsum train` and Seq2SeqTrainer (with accelerate) put the same
examples into every optimizer step, epoch after epoch, for the same seed (data/sampler.h, docs/hf.md "The data
order").

With --learning_rate 0 a step's loss depends only on which examples the step holds, so fitsum's logged loss of every
step of 2 epochs must equal the token-weighted loss of the micro-batches transformers gave that step (1e-5 relative):
plain shuffling, data_seed, group_by_length, dataloader_drop_last, an incomplete last step, 2 processes (accelerate's
BatchSamplerShard, 2 processes with torchrun's variables) and a resume in the middle of the second epoch. With a real learning
rate (AdamW, warmup, clipping, accumulation 2, records of different lengths) 2 epochs of losses agree within 1e-4 and
the final weights within the trajectory bound of test_train.py."""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch
import transformers
from packaging.version import Version

from harness import FAMILIES, assert_close, fitsum, load_file, read_json, save_model, write_jsonl
from order_worker import run as run_hf_worker
from test_train import compare_weights

HF_VERSION = Version(transformers.__version__)
EPOCHS = 2


def make_records(count, vocab, seed, source=(6, 40), labels=(6, 7), eos=1):
    """Sources of many lengths (what group_by_length sorts), unique so that a micro-batch's examples can be named."""
    g = torch.Generator().manual_seed(seed)
    records, seen = [], set()
    while len(records) < count:
        s = int(torch.randint(source[0], source[1], (1,), generator=g))
        t = int(torch.randint(labels[0], labels[1], (1,), generator=g))
        ids = torch.randint(2, vocab, (s,), generator=g).tolist()[:-1] + [eos]
        if tuple(ids) in seen:
            continue
        seen.add(tuple(ids))
        target = torch.randint(2, vocab, (t,), generator=g).tolist()[:-1] + [eos]
        records.append({"id": str(len(records)), "input_ids": ids, "labels": target})
    return records


def zero_lr_args(**k):
    args = dict(learning_rate=0.0, num_train_epochs=EPOCHS, seed=42, per_device_train_batch_size=4,
                gradient_accumulation_steps=1, save_strategy="no", optim="adamw_torch", max_grad_norm=1.0)
    args.update(k)
    return args


def hf_config(tmp_path, folder, records_file, args, family="pegasus", **extra):
    out = tmp_path / "hf"
    out.mkdir(exist_ok=True)
    config = {"family": family, "model": folder, "records": records_file, "args": args, "out": str(out),
              "hf_out": str(tmp_path / "hf-out")}
    config.update(extra)
    return config


def run_hf(config, processes=1):
    """Seq2SeqTrainer's micro-batches of every process: [(rank, record)]."""
    if processes == 1:
        _, result = run_hf_worker(config)
        return [(0, m) for m in result["micro"]], result["log_history"]
    path = os.path.join(config["out"], "config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    with socket.socket() as s:  # a free port for the rendezvous on this machine
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # torchrun's variables, set here: torch 1.13's torch.distributed.run fails under Python 3.11 (its redirects map).
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "order_worker.py")
    running = []
    for rank in range(processes):
        env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(processes), LOCAL_WORLD_SIZE=str(processes))
        running.append(subprocess.Popen([sys.executable, worker, path], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=env))
    for rank, p in enumerate(running):
        output, _ = p.communicate(timeout=1200)
        assert p.returncode == 0, f"rank {rank}:\n{output[-4000:]}"
    micro, history = [], None
    for rank in range(processes):
        got = read_json(os.path.join(config["out"], f"micro-{rank}.json"))
        micro += [(rank, m) for m in got["micro"]]
        history = history or got["log_history"]
    return micro, history


def hf_step_losses(micro):
    """Each optimizer step's loss as fitsum defines it: the summed token loss of all its micro-batches (every
    process's) over their label tokens."""
    steps = {}
    for _, m in micro:
        loss, tokens = steps.get(m["step"], (0.0, 0))
        steps[m["step"]] = (loss + m["loss"] * m["tokens"], tokens + m["tokens"])
    return {step: loss / tokens for step, (loss, tokens) in sorted(steps.items())}


def hf_step_examples(micro):
    steps = {}
    for rank, m in micro:
        steps.setdefault(m["step"], []).append((rank, m["examples"]))
    return steps


def run_fitsum(tmp_path, folder, records_file, args, out_name="fitsum-out", extra=()):
    out = tmp_path / out_name
    flags = ["train", "--model_name_or_path", folder, "--train_file", records_file, "--output_dir", out,
             "--max_source_length", "64", "--max_target_length", "64", "--logging_steps", "1"]
    for key, value in args.items():
        if isinstance(value, bool):
            if value:
                flags.append(f"--{key}")
        else:
            flags += [f"--{key}", value]
    fitsum(*flags, *extra)
    state = read_json(out / "trainer_state.json")
    logs = [e for e in state["log_history"] if "loss" in e and "train_runtime" not in e]
    return logs, out


def assert_same_steps(logs, micro, rel, what, steps=None):
    want = hf_step_losses(micro)
    examples = hf_step_examples(micro)
    got = {e["step"]: e["loss"] for e in logs}
    if steps is None:
        assert sorted(got) == sorted(want), f"{what}: fitsum logged steps {sorted(got)}, transformers ran {sorted(want)}"
    steps = sorted(want) if steps is None else list(steps)
    for step in steps:
        assert step in got and step in want, f"{what}: step {step} missing (fitsum {sorted(got)}, hf {sorted(want)})"
        assert_close(got[step], want[step], rel, f"{what}: step {step} loss (transformers' examples "
                                                 f"{examples[step]})")


def setup_case(tmp_path, count, family="pegasus", seed=1, **record_kwargs):
    f = FAMILIES[family]
    model = f.random_model(seed=7, shape="tiny")
    folder = save_model(model, tmp_path / "model")
    records = make_records(count, model.config.vocab_size, seed, eos=f.eos(), **record_kwargs)
    return folder, write_jsonl(tmp_path / "train.jsonl", records)


ZERO_LR = {
    # name: (records, HF arguments); each makes 2 epochs whose per-process batches divide into whole accumulation
    # steps (transformers 4.47 rounds the steps of an epoch down, later versions up; docs/hf.md).
    "shuffle": (18, zero_lr_args()),  # 5 steps an epoch, the last of 2 examples
    "data_seed": (18, zero_lr_args(data_seed=7)),
    "seed": (18, zero_lr_args(seed=1234)),
    "accumulation": (14, zero_lr_args(per_device_train_batch_size=4, gradient_accumulation_steps=2)),  # 4+2
    "drop_last": (18, zero_lr_args(dataloader_drop_last=True)),  # 4 steps an epoch, 2 examples left out
}


@pytest.mark.parametrize("name", list(ZERO_LR))
def test_every_step_holds_transformers_examples(tmp_path, name):
    count, args = ZERO_LR[name]
    folder, records_file = setup_case(tmp_path, count)
    micro, _ = run_hf(hf_config(tmp_path, folder, records_file, args))
    logs, _ = run_fitsum(tmp_path, folder, records_file, args)
    assert_same_steps(logs, micro, 1e-5, name)


@pytest.mark.parametrize("family", ["pegasus", "t5"])
def test_group_by_length_follows_transformers_global_generator(tmp_path, family):
    """transformers' LengthGroupedSampler draws from torch's global generator. 4.47's BART and PEGASUS draw one number
    more from it per layer and forward (a layer-drop test made even at layerdrop 0; 4.48 and later draw only for
    layerdrop > 0, and T5 never does), so with 4.47 their second epoch is another order: fitsum follows the later
    versions (docs/hf.md)."""
    folder, records_file = setup_case(tmp_path, 40, family=family)
    args = zero_lr_args(per_device_train_batch_size=2, gradient_accumulation_steps=2, group_by_length=True)
    micro, _ = run_hf(hf_config(tmp_path, folder, records_file, args, family=family))
    logs, _ = run_fitsum(tmp_path, folder, records_file, args)
    steps_per_epoch = 10
    if family == "pegasus" and HF_VERSION < Version("4.48"):
        assert_same_steps(logs, micro, 1e-5, "group_by_length, epoch 1", steps=range(1, steps_per_epoch + 1))
        want, got = hf_step_losses(micro), {e["step"]: e["loss"] for e in logs}
        later = range(steps_per_epoch + 1, 2 * steps_per_epoch + 1)
        assert any(abs(got[s] - want[s]) > 1e-4 * abs(want[s]) for s in later), \
            "transformers 4.47's layer-drop draws no longer change PEGASUS's second group_by_length epoch"
    else:
        assert_same_steps(logs, micro, 1e-5, "group_by_length")


def test_two_processes_get_accelerates_shards(tmp_path):
    """2 processes, batch 2, accumulation 2, 14 examples: 7 batches dealt in turn, the last round completed with the
    epoch's first examples (accelerate's even_batches), 2 steps an epoch."""
    folder, records_file = setup_case(tmp_path, 14)
    args = zero_lr_args(per_device_train_batch_size=2, gradient_accumulation_steps=2)
    micro, _ = run_hf(hf_config(tmp_path, folder, records_file, args), processes=2)
    logs, _ = run_fitsum(tmp_path, folder, records_file, args, extra=["--nproc_per_node", "2"])
    duplicated = [m for step in hf_step_examples(micro).values() for _, ms in step for m in ms]
    assert len(duplicated) == 2 * 16, "accelerate no longer completes the last round"
    assert_same_steps(logs, micro, 1e-5, "2 processes")


def test_resume_in_the_middle_of_an_epoch_continues_transformers_order(tmp_path):
    """A checkpoint at step 7 (the second step of epoch 2), resumed: HF skips the epoch's first batches
    (ignore_data_skip=False), fitsum continues its plan; the remaining steps hold the same examples."""
    folder, records_file = setup_case(tmp_path, 18)
    args = zero_lr_args(save_strategy="steps", save_steps=7)
    config = hf_config(tmp_path, folder, records_file, args)
    run_hf(config)
    resumed, _ = run_hf(dict(config, resume=os.path.join(config["hf_out"], "checkpoint-7")))
    assert sorted({m["step"] for _, m in resumed}) == [8, 9, 10]
    logs, out = run_fitsum(tmp_path, folder, records_file, args)
    again, _ = run_fitsum(tmp_path, folder, records_file, args, out_name="fitsum-out",
                          extra=["--resume_from_checkpoint", str(out / "checkpoint-7")])
    assert_same_steps(again, resumed, 1e-5, "resumed at step 7", steps=[8, 9, 10])


def test_trajectory_over_two_epochs(tmp_path):
    """AdamW with warmup, linear decay, weight decay and clipping, accumulation 2, sources and labels of different
    lengths (transformers weighting the micro-batches by label tokens, as fitsum does: test_train.py), 2 epochs of 3
    steps."""
    folder, records_file = setup_case(tmp_path, 12, labels=(2, 15))
    args = dict(learning_rate=3e-3, num_train_epochs=EPOCHS, seed=42, per_device_train_batch_size=2,
                gradient_accumulation_steps=2, save_strategy="no", optim="adamw_torch", warmup_steps=2,
                lr_scheduler_type="linear", weight_decay=0.01, max_grad_norm=0.5, adam_epsilon=1e-6)
    config = hf_config(tmp_path, folder, records_file, args, token_weighted=True)
    trainer, result = run_hf_worker(config)
    micro = [(0, m) for m in result["micro"]]
    logs, out = run_fitsum(tmp_path, folder, records_file, args)
    assert len(logs) == 6
    assert_same_steps(logs, micro, 1e-4, "AdamW, 2 epochs")
    hf_logs = [e for e in result["log_history"] if "grad_norm" in e]
    for got, want in zip(logs, hf_logs):
        assert_close(got["grad_norm"], want["grad_norm"], 1e-4, f"step {got['step']} grad_norm")

    def regrouped():
        # The same 4 examples per step as 4 x 1 micro-batches (the shuffle does not depend on the batch size).
        again, _ = run_hf_worker(dict(config, args=dict(args, per_device_train_batch_size=4,
                                                        gradient_accumulation_steps=1),
                                      hf_out=str(tmp_path / "hf-regrouped")))
        return again.model

    compare_weights(load_file(str(out / "model.safetensors")), trainer.model, "AdamW, 2 epochs", regrouped)
