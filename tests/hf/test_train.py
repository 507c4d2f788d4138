"""Training: 5 optimizer steps of `fitsum train` against transformers' Seq2SeqTrainer on the same HF folder and
data: the loss of every step, grad_norm, the learning rates and the final weights, for Adafactor and AdamW with
warmup, linear decay, weight decay, max_grad_norm, gradient accumulation and gradient checkpointing.

The data set holds exactly one effective batch (per_device_train_batch_size x gradient_accumulation_steps
examples), so every optimizer step sees every example and both trainers' shuffling orders give the same updates."""
import json
import os

import pytest
import torch
import transformers
from packaging.version import Version
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

from harness import FAMILIES, assert_close, fitsum, load_file, read_json, rms, save_model, write_jsonl

PEGASUS = FAMILIES["pegasus"]
STEPS = 5
# transformers 4.47 (seen with 4.47.1) for a model without loss kwargs such as PEGASUS, and 5.x for PEGASUS, whose
# forward declares loss kwargs its loss then ignores: the Trainer no longer divides the micro-batch losses by
# gradient_accumulation_steps, neither in backward nor in what it logs. Its gradients and logged losses are then
# gradient_accumulation_steps times the step's mean; the updates still agree with fitsum's when clipping normalises
# the gradient (max_grad_norm below every step's gradient norm), and Adafactor and AdamW are insensitive to that scale.
HF_VERSION = Version(transformers.__version__)
# transformers 4.51 logs the learning rate the step used (huggingface/transformers#36973); earlier versions logged the
# next step's. fitsum logs the step's.
HF_LOGS_NEXT_LR = HF_VERSION < Version("4.51")


def pegasus_loss_takes_num_items(model):
    """Whether the installed PEGASUS's loss divides by num_items_in_batch when given it."""
    ids = torch.tensor([[5, 6, 7, 1]])
    labels = torch.tensor([[8, 9, 1]])
    was_training = model.training
    model.eval()  # no dropout: the two losses differ only if num_items_in_batch is used
    try:
        with torch.no_grad():
            plain = model(input_ids=ids, labels=labels).loss
            given = model(input_ids=ids, labels=labels, num_items_in_batch=torch.tensor(1000)).loss
    except TypeError:
        return False
    finally:
        model.train(was_training)
    return not torch.allclose(plain, given)


def hf_sums_micro_batch_means(trainer):
    """Whether the Trainer adds PEGASUS's micro-batch mean losses up instead of averaging them (no division by
    gradient_accumulation_steps, in backward and in what it logs). transformers 4.47: always, once it knows a step's
    label tokens (num_items_in_batch). Later versions: when the model's forward declares loss kwargs, which 5.x's
    PEGASUS does (**kwargs) while its loss ignores num_items_in_batch (huggingface/transformers#47688)."""
    if HF_VERSION < Version("4.48"):
        return not trainer.model_accepts_loss_kwargs
    return trainer.model_accepts_loss_kwargs and not pegasus_loss_takes_num_items(trainer.model)


def make_records(count, label_lengths, vocab, seed, source=(9, 16), eos=1):
    g = torch.Generator().manual_seed(seed)
    records = []
    for i in range(count):
        s = int(torch.randint(source[0], source[1], (1,), generator=g))
        t = label_lengths[i % len(label_lengths)]
        ids = torch.randint(2, vocab, (s,), generator=g).tolist()[:-1] + [eos]
        labels = torch.randint(2, vocab, (t,), generator=g).tolist()[:-1] + [eos]
        records.append({"id": str(i), "input_ids": ids, "labels": labels})
    return records


class Records(torch.utils.data.Dataset):
    def __init__(self, records):
        self.records = records

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        return {"input_ids": self.records[i]["input_ids"], "labels": self.records[i]["labels"]}


def collate(features, pad=0):
    """DataCollatorForSeq2Seq without a tokenizer: pad on the right, labels padded with -100."""
    source = max(len(f["input_ids"]) for f in features)
    target = max(len(f["labels"]) for f in features)
    ids = torch.full((len(features), source), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full((len(features), target), -100, dtype=torch.long)
    for b, f in enumerate(features):
        ids[b, :len(f["input_ids"])] = torch.tensor(f["input_ids"])
        mask[b, :len(f["input_ids"])] = 1
        labels[b, :len(f["labels"])] = torch.tensor(f["labels"])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class RecordingTrainer(Seq2SeqTrainer):
    """Keeps each micro-batch's mean loss and label-token count, unrounded (the Trainer logs 4 decimals)."""

    def __init__(self, *args, loss_func=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.micro = []
        self.loss_func = loss_func  # Trainer's compute_loss_func hook, which 4.47's Seq2SeqTrainer does not take

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.loss_func is not None:
            loss = self.loss_func(model(**inputs), inputs["labels"], num_items_in_batch)
        else:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        tokens = int(inputs["labels"].ne(-100).sum())
        self.micro.append((float(loss.detach()), tokens))
        return loss


# AdamW's epsilon for the comparisons. With the default 1e-8, an element whose gradient is close to zero moves by
# lr x m / sqrt(v), which turns the gradient's last-bit rounding into a visible difference of the final weight: measured
# on the tiny shapes after 5 steps, transformers against itself under another accumulation (the same sums in another
# order) differs by up to 2e-5 x the tensor's RMS, and fitsum (whose fused kernels round differently) by 0.7e-4 to
# 3.3e-4 x RMS, always on such elements. With 1e-6 those elements are damped and fitsum against transformers is within
# 1.6e-5 x RMS, so the 1e-4 bound below tests the optimizer rather than the rounding of near-zero gradients (and a
# non-default adam_epsilon must reach fitsum's AdamW).
ADAM_EPSILON = 1e-6


def knobs(optim, accumulation, batch, checkpointing):
    k = dict(optim=optim, per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation,
             learning_rate=3e-3, warmup_steps=2, lr_scheduler_type="linear", weight_decay=0.01, max_grad_norm=0.5,
             max_steps=STEPS, logging_steps=1, seed=42, gradient_checkpointing=checkpointing)
    if optim.startswith("adamw"):
        k["adam_epsilon"] = ADAM_EPSILON
    return k


def run_hf(folder, records, out_dir, k, compute_loss_func=None, family=PEGASUS):
    model = family.model_class.from_pretrained(folder)
    args = Seq2SeqTrainingArguments(output_dir=str(out_dir), report_to=[], save_strategy="no", use_cpu=True,
                                    disable_tqdm=True, **k)
    trainer = RecordingTrainer(model=model, args=args, train_dataset=Records(records),
                               data_collator=lambda features: collate(features, family.pad()),
                               loss_func=compute_loss_func)
    trainer.train()
    logs = [e for e in trainer.state.log_history if "loss" in e]
    return trainer, logs


def run_fitsum(folder, records, tmp_path, k):
    train_file = write_jsonl(tmp_path / "train.jsonl", records)
    out = tmp_path / "fitsum-out"
    flags = ["train", "--model_name_or_path", folder, "--train_file", train_file, "--output_dir", out,
             "--save_steps", "1000000", "--max_source_length", "64", "--max_target_length", "64"]
    for key, value in k.items():
        if key == "gradient_checkpointing":
            if value:
                flags.append("--gradient_checkpointing")
            continue
        flags += [f"--{key}", value]
    fitsum(*flags)
    state = read_json(out / "trainer_state.json")
    logs = [e for e in state["log_history"] if "loss" in e and "train_runtime" not in e]
    return logs, load_file(str(out / "model.safetensors"))


def step_losses(micro, accumulation, token_weighted):
    """Each optimizer step's loss from the micro-batches' mean losses."""
    steps = []
    for s in range(0, len(micro), accumulation):
        chunk = micro[s:s + accumulation]
        if token_weighted:
            steps.append(sum(m * n for m, n in chunk) / sum(n for _, n in chunk))
        else:
            steps.append(sum(m for m, _ in chunk) / len(chunk))
    return steps


def compare_weights(got, model, what, regrouped=None):
    """Every final weight within 1e-4 x its tensor's RMS of transformers'. Where a tensor misses that and `regrouped` is
    given (a function training transformers again on the same sums grouped into other micro-batches, returning its
    model), the bound for that tensor becomes twice transformers' own difference under the regrouping: a measure of
    how far the run's rounding carries on this CPU. T5 v1.1's AdamW run with accumulation 4 is such a case on an AMD
    EPYC (OpenBLAS's Haswell kernels): transformers against itself regrouped 2.7e-4 x RMS on the tensor where fitsum
    is at 1.2e-4 (on an Intel Xeon both were within 1e-4)."""
    seen, other = set(), None
    for name, want in model.state_dict().items():
        if want.data_ptr() in seen:
            continue  # a tied copy of a tensor compared already (the embeddings, a tied LM head)
        seen.add(want.data_ptr())
        if name.endswith("k_proj.bias"):
            continue  # its gradient is rounding noise (fixtures README)
        assert name in got, f"{what}: fitsum's checkpoint lacks {name}"
        g, w = got[name].double(), want.double()
        if regrouped is None or g.shape != w.shape or (g - w).abs().max() <= 1e-4 * rms(w):
            assert_close(got[name], want, 1e-4, f"{what}: final {name}")
            continue
        other = other if other is not None else regrouped().state_dict()
        noise = float((other[name].double() - w).abs().max())
        worst = float((g - w).abs().max())
        assert worst <= 2 * noise, (f"{what}: final {name}: max |fitsum - hf| = {worst:.3e} > 1e-4 x RMS "
                                    f"{float(rms(w)):.3e} and > 2 x transformers' own difference when regrouped, "
                                    f"{noise:.3e}")


EQUAL = [
    # (optim, gradient_accumulation_steps, per_device_train_batch_size, gradient_checkpointing)
    ("adafactor", 1, 4, False),
    ("adafactor", 2, 2, True),
    ("adamw_torch", 4, 1, False),
    ("adamw_torch", 2, 2, True),
]


@pytest.mark.parametrize("family", ["pegasus", "bart", "t5", "t5_v1_1", "pegasus_x", "longt5_local",
                                    "longt5_tglobal"])
@pytest.mark.parametrize("optim,accumulation,batch,checkpointing", EQUAL,
                         ids=[f"{o}-acc{a}-b{b}{'-ckpt' if c else ''}" for o, a, b, c in EQUAL])
def test_trajectory_equals_seq2seq_trainer(tmp_path, family, optim, accumulation, batch, checkpointing):
    f = FAMILIES[family]
    model = f.random_model(seed=7, shape="tiny")
    folder = save_model(model, tmp_path / "model")
    # Every label has 6 tokens: each micro-batch holds the same number of label tokens, so the mean of micro-batch
    # means (transformers 4.47 for PEGASUS and BART) and the token-weighted mean (fitsum) are the same loss.
    records = make_records(batch * accumulation, [6], model.config.vocab_size, seed=1, eos=f.eos())
    k = knobs(optim, accumulation, batch, checkpointing)
    trainer, hf_logs = run_hf(folder, records, tmp_path / "hf-out", k, family=f)
    logs, weights = run_fitsum(folder, records, tmp_path, k)

    assert len(logs) == STEPS and len(hf_logs) == STEPS
    want_losses = step_losses(trainer.micro, accumulation, token_weighted=False)
    scale = accumulation if hf_sums_micro_batch_means(trainer) else 1
    for step, (got, want, hf_log) in enumerate(zip(logs, want_losses, hf_logs), start=1):
        assert got["step"] == hf_log["step"] == step
        assert_close(got["loss"], want, 1e-4, f"step {step} loss")
        assert abs(hf_log["loss"] - round(want * scale, 4)) <= 1.5e-4, f"step {step}: HF logged {hf_log['loss']}"
        assert_close(got["grad_norm"] * scale, hf_log["grad_norm"], 1e-4, f"step {step} grad_norm (x {scale})")
        if scale != 1:
            assert got["grad_norm"] > k["max_grad_norm"], "clipping no longer hides the Trainer's scale"
        if not HF_LOGS_NEXT_LR:
            assert_close(got["learning_rate"], hf_log["learning_rate"], 1e-6, f"step {step} learning_rate")
        elif step < STEPS:
            assert_close(logs[step]["learning_rate"], hf_log["learning_rate"], 1e-6,
                         f"step {step + 1} learning_rate (logged by transformers < 4.51 at step {step})")
    assert logs[0]["learning_rate"] == 0.0, "linear warmup starts at 0: the first step's rate"
    def regrouped():
        # The same 4 examples per step in other micro-batches: (1, 4) <-> (4, 1), (2, 2) -> (1, 4).
        other_batch = {1: 4, 4: 1, 2: 4}[batch]
        again, _ = run_hf(folder, records, tmp_path / "hf-regrouped", knobs(optim, 4 // other_batch, other_batch,
                                                                              checkpointing), family=f)
        return again.model

    compare_weights(weights, trainer.model, f"{optim} accumulation {accumulation}", regrouped)


def test_unequal_label_tokens_are_weighted_by_tokens(tmp_path):
    """Micro-batches of 2, 5, 9 and 14 label tokens. fitsum divides each step's summed token loss by the step's label
    tokens (exact accumulation). transformers 4.47's PEGASUS averages the micro-batches' means instead; the
    token-weighted loss is what transformers >= 4.46 computes for models whose loss takes num_items_in_batch, here
    reproduced by a compute_loss that receives num_items_in_batch (Trainer's compute_loss_func hook). fitsum matches
    the token-weighted run and not the plain one."""
    model = PEGASUS.random_model(seed=8, shape="tiny")
    folder = save_model(model, tmp_path / "model")
    records = make_records(4, [2, 5, 9, 14], model.config.vocab_size, seed=2)
    k = knobs("adafactor", 4, 1, False)

    def token_weighted(outputs, labels, num_items_in_batch):
        # transformers' loss for models with loss kwargs: the micro-batch's summed token loss over the step's label
        # tokens; the Trainer adds these up over the step's micro-batches.
        logits = outputs["logits"]
        total = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1),
                                                  ignore_index=-100, reduction="sum")
        return total / num_items_in_batch

    weighted, weighted_logs = run_hf(folder, records, tmp_path / "hf-weighted", k, compute_loss_func=token_weighted)
    plain, plain_logs = run_hf(folder, records, tmp_path / "hf-plain", k)
    logs, weights = run_fitsum(folder, records, tmp_path, k)

    plain_losses = step_losses(plain.micro, 4, token_weighted=False)
    for step, (got, w_log) in enumerate(zip(logs, weighted_logs), start=1):
        assert_close(got["grad_norm"], w_log["grad_norm"], 1e-4, f"step {step} grad_norm (token-weighted)")
    # The first step starts from the same weights: its loss is the same data weighted two ways.
    first_weighted = sum(m for m, _ in weighted.micro[:4])
    assert_close(logs[0]["loss"], first_weighted, 1e-4, "step 1 loss (token-weighted)")
    compare_weights(weights, weighted.model, "token-weighted accumulation")
    if plain.model_accepts_loss_kwargs and pegasus_loss_takes_num_items(plain.model):
        # A transformers whose PEGASUS takes loss kwargs weights by tokens itself: fitsum equals its plain run too.
        compare_weights(weights, plain.model, "plain Seq2SeqTrainer (token-weighted by transformers)")
    else:
        # transformers 4.47 (PEGASUS takes no loss kwargs) and 5.x (it declares them and ignores num_items_in_batch):
        # the Trainer averages (4.47) or adds up (5.x) the micro-batches' means, weighting them equally.
        assert abs(logs[0]["loss"] - plain_losses[0]) > 1e-3 * abs(plain_losses[0]), \
            "the data no longer separates token weighting from the mean of micro-batch means"
        with pytest.raises(AssertionError):
            compare_weights(weights, plain.model, "mean of micro-batch means")
