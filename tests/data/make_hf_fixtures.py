"""Regenerates the expected values of tests/data from transformers itself (the real PegasusForConditionalGeneration,
Adafactor, torch AdamW and generate()), keeping each file's inputs and format, and records the transformers and torch
versions in every file it writes ("generated_by"). The default test suite reads these files offline.

    build/hf-venv/bin/python tests/data/make_hf_fixtures.py        (the venv of `make test-hf`; run from the root)

- fixtures/odd-pegasus/case.json: loss, logits, encoder states, gradients, 3 Adafactor and 3 AdamW steps, greedy and
  beam outputs for the batch and weights beside it. As the file always has, gradients and trajectories use the
  embedding looked up without padding_idx (the C++ tests compare them with `embedding_padding_idx=none`); here that
  is transformers' model with padding_idx set to None on the shared embedding.
- fixtures/{tiny,odd}-pegasus/hf_padding.json: the same batch's loss and gradients with transformers as it is
  (padding_idx = pad_token_id: the pad row learns only through the tied LM head). tiny-pegasus's weights and batch
  are ../shared/fixtures/tiny-pegasus.
- generation_cases.json: every case's sequences and beam scores from generate() with the case's options.
"""
import json
import os
import sys

import torch
import transformers
from transformers import PegasusForConditionalGeneration
from transformers.optimization import Adafactor

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("FITSUM_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
FIXTURES = {"tiny-pegasus": os.path.join(SHARED, "fixtures", "tiny-pegasus"),
            "odd-pegasus": os.path.join(HERE, "fixtures", "odd-pegasus")}
GENERATED_BY = {"script": "tests/data/make_hf_fixtures.py", "transformers": transformers.__version__,
                "torch": torch.__version__}


def sample(t):
    """The same fixed, order-stable sample of entries as the plain reference's case.json."""
    flat = t.detach().reshape(-1)
    idx = list(range(0, flat.numel(), max(1, flat.numel() // 16)))[:16]
    return {"index": idx, "value": [float(flat[i]) for i in idx], "sum": float(flat.double().sum()),
            "l2": float(flat.double().norm())}


def load(folder, padding_idx=True):
    model = PegasusForConditionalGeneration.from_pretrained(folder).eval()
    if not padding_idx:
        for embedding in (model.model.shared, model.model.encoder.embed_tokens, model.model.decoder.embed_tokens):
            embedding.padding_idx = None
    return model


def trainable(model):
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def forward(model, case):
    ids, mask, labels = (torch.tensor(case[k]) for k in ("input_ids", "attention_mask", "labels"))
    return model(input_ids=ids, attention_mask=mask, labels=labels)


def gradients(model, case):
    model.zero_grad()
    out = forward(model, case)
    out.loss.backward()
    params = trainable(model)
    total = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params.values()))
    return out, {n: p.grad for n, p in params.items()}, float(total)


def decay_groups(model, weight_decay):
    """Trainer.get_decay_parameter_names: no weight decay for biases and LayerNorm weights."""
    no_decay = {f"{m}.{p}" for m, mod in model.named_modules() if isinstance(mod, torch.nn.LayerNorm)
                for p, _ in mod.named_parameters(recurse=False)}
    decay, rest = [], []
    for n, p in trainable(model).items():
        (rest if n in no_decay or "bias" in n else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def trajectory(folder, case, kind, lr, weight_decay, probe_names, steps=3):
    model = load(folder, padding_idx=False)
    groups = decay_groups(model, weight_decay)
    if kind == "adafactor":  # what optim="adafactor" builds
        optimizer = Adafactor(groups, lr=lr, scale_parameter=False, relative_step=False)
    else:  # optim="adamw_torch"
        optimizer = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = forward(model, case).loss
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
    params = dict(model.named_parameters())
    return losses, {n: sample(params[n]) for n in probe_names}


def generate(model, ids, mask, **kwargs):
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), output_scores=True,
                             return_dict_in_generate=True, **kwargs)
    scores = getattr(out, "sequences_scores", None)
    return out.sequences.tolist(), None if scores is None else scores.tolist()


def regenerate_case(folder):
    path = os.path.join(folder, "case.json")
    case = json.load(open(path))
    model = load(folder, padding_idx=False)
    out, grads, total = gradients(model, case)
    case["about"] = ("Expected values for the checkpoint beside this file, computed by transformers' "
                     "PegasusForConditionalGeneration with padding_idx removed from the shared embedding (see "
                     "tests/data/make_hf_fixtures.py); float32 CPU, no dropout.")
    case["generated_by"] = GENERATED_BY
    case["loss"] = out.loss.item()
    case["logits"] = {"shape": list(out.logits.shape), **sample(out.logits)}
    case["encoder_last_hidden_state"] = sample(out.encoder_last_hidden_state)
    case["grads"] = {n: sample(grads[n]) for n in case["grads"]}
    case["grad_global_l2"] = total
    for kind in ("adafactor", "adamw"):
        entry = case[kind]
        losses, params = trajectory(folder, case, kind, entry["learning_rate"], entry["weight_decay"],
                                    list(entry["params_after_3_steps"]))
        entry["losses_before_each_step"], entry["params_after_3_steps"] = losses, params
    g = case["greedy"]
    g["sequences"], _ = generate(model, g["input_ids"], g["attention_mask"], num_beams=1, max_length=g["max_length"])
    for key in ("beam", "beam_min_length"):
        e = case[key]
        e["sequences"], e["sequence_scores"] = generate(
            model, g["input_ids"], g["attention_mask"], num_beams=e["num_beams"], max_length=e["max_length"],
            length_penalty=e["length_penalty"], min_length=e["min_length"], early_stopping=False)
    case["beam"]["note"] = (f"transformers {transformers.__version__} generate(); every hypothesis ends in the forced "
                            "eos, which both length normalisations count alike; early_stopping=False")
    json.dump(case, open(path, "w"), indent=1)
    print(path, "loss", case["loss"])


def regenerate_hf_padding(name, folder):
    case = json.load(open(os.path.join(folder, "case.json")))
    out, grads, total = gradients(load(folder), case)
    path = os.path.join(HERE, "fixtures", name, "hf_padding.json")
    names = list(json.load(open(path))["grads"]) if os.path.exists(path) else list(case["grads"])
    result = {"about": "case.json's batch with transformers' own embedding (padding_idx = pad_token_id)",
              "generated_by": GENERATED_BY, "loss": out.loss.item(), "grads": {n: sample(grads[n]) for n in names},
              "grad_global_l2": total}
    json.dump(result, open(path, "w"), indent=1)
    print(path, "loss", result["loss"])


def regenerate_generation_cases():
    path = os.path.join(HERE, "generation_cases.json")
    data = json.load(open(path))
    data["about"] = ("Expected transformers generate() outputs for tests/model/generate_test.cpp, made by "
                     "tests/data/make_hf_fixtures.py. Fixtures: tiny-pegasus is ../shared/fixtures/tiny-pegasus, "
                     "odd-pegasus is tests/data/fixtures/odd-pegasus. Token ids: start 0, eos 1, pad 0.")
    data["generated_by"] = GENERATED_BY
    models = {}
    for c in data["cases"]:
        model = models.setdefault(c["fixture"], load(FIXTURES[c["fixture"]]))
        o = dict(c["options"])
        forced = o.pop("forced_eos_token_id")
        c["sequences"], scores = generate(model, c["input_ids"], c["attention_mask"], forced_eos_token_id=forced,
                                          **o)
        if scores is not None:
            c["sequence_scores"] = scores
        else:
            c.pop("sequence_scores", None)
    json.dump(data, open(path, "w"), indent=1)
    print(path, len(data["cases"]), "cases")


def main():
    if not os.path.isdir(FIXTURES["tiny-pegasus"]):
        sys.exit(f"make_hf_fixtures: {FIXTURES['tiny-pegasus']} is missing (set FITSUM_SHARED_DIR)")
    torch.set_num_threads(1)
    regenerate_case(FIXTURES["odd-pegasus"])
    for name, folder in FIXTURES.items():
        regenerate_hf_padding(name, folder)
    regenerate_generation_cases()


if __name__ == "__main__":
    main()
