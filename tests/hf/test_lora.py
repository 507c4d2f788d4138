"""LoRA against PEFT (peft from PyPI on transformers): fitsum's adapters compute, train, generate, merge and are
saved as PEFT's.

Every comparison starts from an adapter PEFT itself saved with init_lora_weights=False, so that B is not zero (PEFT's
default zero B would leave A's gradient zero and hide half of the check): fitsum loads it (fitsum_hf_probe --adapter,
`fitsum train --adapter_name_or_path`, `fitsum merge --adapter`), PEFT loads it with PeftModel.from_pretrained.
- forward: logits, loss and the gradient of every trainable tensor (A, B, the biases `bias` trains, modules_to_save),
  which is also the check that fitsum trains exactly what PEFT trains;
- 5 `fitsum train` steps against Seq2SeqTrainer on the PeftModel, Adafactor and AdamW: each step's loss and
  grad_norm, and every final adapter tensor, within test_train.py's bounds (docs/hf.md);
- generate() ids with the adapter loaded and with the merged model (`fitsum merge` against merge_and_unload);
- PEFT loads fitsum's adapter (the same keys and config fields PEFT writes, no missing or unexpected key) and
  computes what fitsum computes with it."""
import json
import warnings

import pytest
import torch
from peft import LoraConfig, PeftConfig, PeftModel, get_peft_model
from peft.utils import get_peft_model_state_dict
from safetensors import safe_open

from harness import FAMILIES, assert_close, fitsum, load_file, probe, read_json, rms, save_batch, save_model
from test_forward import make_batch
from test_generate import hf_generate, hf_padding_as_pad, sources
from test_train import ADAM_EPSILON, RecordingTrainer, Records, collate, make_records

# PEFT's default targets (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING): PEGASUS has no entry there, so PEFT
# needs them named; BART's and T5's entries are these.
QV = {"pegasus": ["q_proj", "v_proj"], "bart": ["q_proj", "v_proj"], "t5": ["q", "v"], "t5_v1_1": ["q", "v"]}
# A normalisation layer of every family, for modules_to_save (PEFT matches it as a name suffix).
NORM = {"pegasus": "final_layer_norm", "bart": "final_layer_norm", "t5": "final_layer_norm",
        "t5_v1_1": "final_layer_norm"}


def lora_config(family, variant):
    """The LoraConfig keyword arguments of a named variant."""
    base = dict(r=4, lora_alpha=8, target_modules=QV[family], task_type="SEQ_2_SEQ_LM")
    if variant == "qv":
        return base
    if variant == "all-linear-rslora":
        return dict(base, r=8, lora_alpha=12, target_modules="all-linear", use_rslora=True)
    if variant == "bias-all":
        return dict(base, bias="all")
    if variant == "bias-lora_only":
        return dict(base, bias="lora_only")
    if variant == "modules_to_save":
        return dict(base, modules_to_save=[NORM[family]])
    raise ValueError(variant)


# (family, variant) pairs: T5 has no biases, so its bias variants would say nothing.
VARIANTS = ["qv", "all-linear-rslora", "bias-all", "bias-lora_only", "modules_to_save"]
CASES = [(family, variant) for family in ("pegasus", "bart", "t5", "t5_v1_1") for variant in VARIANTS
         if not (family.startswith("t5") and variant.startswith("bias"))]


def fitsum_name(peft_name):
    """fitsum's parameter name (model/lora.h) for a live PeftModel parameter name."""
    name = peft_name.removeprefix("base_model.model.")
    for wrapper in (".lora_A.default.", ".lora_B.default."):
        name = name.replace(wrapper, wrapper.removesuffix("default."))
    return name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")


def peft_adapter(family, variant, folder, out, seed=3, peft_init=False):
    """PEFT's own adapter on the HF folder, with init_lora_weights=False (A and B both U(-1/sqrt(fan_in), ...)), or
    with PEFT's default initialisation (kaiming-uniform A, zero B) when `peft_init`, and the biases and
    modules_to_save copies it trains moved off the base's values, so that a loader which kept the base's would be
    seen. Returns the PeftModel (train mode) and the adapter folder."""
    f = FAMILIES[family]
    model = f.model_class.from_pretrained(folder)
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, LoraConfig(init_lora_weights=peft_init, **lora_config(family, variant)))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if p.requires_grad and "lora_" not in name:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    peft_model.save_pretrained(out)
    return peft_model.train(), str(out)


def adapter_gradients(peft_model):
    return {fitsum_name(n): p.grad for n, p in peft_model.named_parameters() if p.requires_grad}


def float64_gradients(f, folder, adapter, input_ids, attention_mask, labels):
    """PEFT's adapter gradients with the model and the adapter in float64. float64 is also the default dtype
    meanwhile: transformers 4.47's PEGASUS and BART build their attention masks in it."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        base = f.model_class.from_pretrained(folder, torch_dtype=torch.float64)
        exact = PeftModel.from_pretrained(base, adapter, is_trainable=True).double().train()
        exact(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    finally:
        torch.set_default_dtype(default)
    return adapter_gradients(exact)


@pytest.mark.parametrize("family,variant", CASES, ids=[f"{f}-{v}" for f, v in CASES])
def test_forward_and_every_adapter_gradient_equal_peft(tmp_path, family, variant):
    f = FAMILIES[family]
    folder = save_model(f.random_model(seed=11, shape="tiny"), tmp_path / "model")
    peft_model, adapter = peft_adapter(family, variant, folder, tmp_path / "adapter")
    input_ids, attention_mask, labels = make_batch(peft_model.config.vocab_size, 3, 13, 9, seed=5, pad=f.pad(),
                                                   eos=f.eos())
    out = peft_model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    out.loss.backward()
    want = adapter_gradients(peft_model)
    assert any(".lora_A." in n for n in want) and all(float(g.abs().max()) > 0 for n, g in want.items()
                                                      if ".lora_" in n), "PEFT's adapter gradients are zero"

    probe("forward", "--model", folder, "--adapter", adapter, "--batch",
          save_batch(tmp_path / "batch.safetensors", input_ids=input_ids, attention_mask=attention_mask,
                     labels=labels), "--out", tmp_path / "fitsum.safetensors")
    got = load_file(str(tmp_path / "fitsum.safetensors"))

    assert_close(got["loss"][0], out.loss.detach(), 1e-5, "loss")
    assert_close(got["train_loss"][0], out.loss.detach(), 1e-5, "loss (training path)")
    assert_close(got["logits"], out.logits.detach(), 1e-4, "logits")
    trained = {k[len("grad."):] for k in got if k.startswith("grad.")}
    assert trained == set(want), f"trainable tensors differ from PEFT's: {sorted(trained ^ set(want))}"
    # The reference gradients in float64. A large adapter (B at init_lora_weights=False's scale) on every Linear makes
    # some gradients ill-conditioned: PEFT's own float32 gradients are up to 1.9e-4 x RMS from its float64 ones (T5
    # v1.1, all-linear). Each tensor is held to 1e-4 x RMS of float64 PEFT, or to twice PEFT float32's own distance
    # from it where that is larger (fitsum no less exact than PEFT).
    reference = float64_gradients(f, folder, adapter, input_ids, attention_mask, labels)
    for name, g in reference.items():
        if name.endswith("k_proj.bias"):
            # Mathematically zero (test_forward.py): rounding noise far below v_proj.bias's gradient.
            scale = rms(reference[name.replace("k_proj", "v_proj")])
            for prefix in ("grad.", "train_grad."):
                assert float(got[prefix + name].abs().max()) <= 1e-4 * scale, f"{prefix}{name} is not ~0"
            continue
        bound = max(1e-4 * rms(g), 2 * float((want[name].double() - g).abs().max()))
        for prefix, path in (("grad.", ""), ("train_grad.", " (training path)")):
            worst = float((got[prefix + name].double() - g).abs().max())
            assert worst <= bound, (f"d loss / d {name}{path}: max |fitsum - PEFT float64| = {worst:.3e} > "
                                    f"{bound:.3e} (1e-4 x RMS {rms(g):.3e}, or twice PEFT float32's own distance)")


STEPS = 5


def train_knobs(optim):
    # test_train.py's run without accumulation: one micro-batch of 4 per step (the Trainer's loss scaling under
    # accumulation is test_train.py's subject, not this one's).
    k = dict(optim=optim, per_device_train_batch_size=4, gradient_accumulation_steps=1, learning_rate=3e-3,
             warmup_steps=2, lr_scheduler_type="linear", weight_decay=0.01, max_grad_norm=0.5, max_steps=STEPS,
             logging_steps=1, seed=42)
    if optim.startswith("adamw"):
        k["adam_epsilon"] = ADAM_EPSILON
    return k


def run_peft_trainer(family, folder, adapter, records, out_dir, k, dtype=torch.float32):
    from transformers import Seq2SeqTrainingArguments
    f = FAMILIES[family]
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # transformers 4.47's PEGASUS and BART build their masks in the default dtype
    try:
        base = f.model_class.from_pretrained(folder, torch_dtype=dtype)
        model = PeftModel.from_pretrained(base, adapter, is_trainable=True).to(dtype)
        args = Seq2SeqTrainingArguments(output_dir=str(out_dir), report_to=[], save_strategy="no", use_cpu=True,
                                        disable_tqdm=True, **k)
        trainer = RecordingTrainer(model=model, args=args, train_dataset=Records(records),
                                   data_collator=lambda features: collate(features, f.pad()))
        trainer.train()
    finally:
        torch.set_default_dtype(default)
    return trainer, [e for e in trainer.state.log_history if "loss" in e]


def assert_final_adapter(final, trainer, exact, what=""):
    """Every final adapter tensor within 1e-4 x RMS of the float64 Trainer run's, or within twice the float32
    Trainer's own distance from it where that is larger: an adapter that starts at zero (PEFT's B) ends small, and
    AdamW's normalised update carries its first steps' rounding into it (fitsum no less exact than PEFT)."""
    want = get_peft_model_state_dict(trainer.model)
    reference = get_peft_model_state_dict(exact.model)
    for name, w in want.items():
        if name.endswith("k_proj.bias"):
            continue  # its gradient is rounding noise (test_train.py), which Adafactor's normalised update amplifies
        g = reference[name].double()
        bound = max(1e-4 * rms(g), 2 * float((w.double() - g).abs().max()))
        worst = float((final[name].double() - g).abs().max())
        assert worst <= bound, (f"{what}final {name}: max |fitsum - PEFT float64| = {worst:.3e} > {bound:.3e} "
                                f"(1e-4 x RMS {rms(g):.3e}, or twice PEFT float32's own distance)")


def run_fitsum_train(folder, records, out, k, *extra):
    from harness import write_jsonl
    flags = ["train", "--model_name_or_path", folder, "--train_file", write_jsonl(out.parent / "train.jsonl", records),
             "--output_dir", out, "--save_steps", "1000000", "--max_source_length", "64", "--max_target_length", "64",
             *extra]
    for key, value in k.items():
        flags += [f"--{key}", value]
    fitsum(*flags)
    state = read_json(out / "trainer_state.json")
    return [e for e in state["log_history"] if "loss" in e and "train_runtime" not in e]


TRAIN = [("pegasus", "qv", "adafactor"), ("pegasus", "qv", "adamw_torch"), ("pegasus", "all-linear-rslora",
         "adamw_torch"), ("t5", "qv", "adafactor"), ("t5", "qv", "adamw_torch"), ("t5_v1_1", "all-linear-rslora",
         "adafactor"), ("bart", "qv", "adamw_torch"), ("bart", "bias-all", "adafactor"),
         ("pegasus", "modules_to_save", "adamw_torch")]


@pytest.mark.parametrize("family,variant,optim", TRAIN, ids=[f"{f}-{v}-{o}" for f, v, o in TRAIN])
def test_five_steps_equal_seq2seq_trainer_with_peft(tmp_path, family, variant, optim):
    f = FAMILIES[family]
    folder = save_model(f.random_model(seed=7, shape="tiny"), tmp_path / "model")
    # From PEFT's own initial adapter (kaiming-uniform A, zero B), as a PEFT user starts: init_lora_weights=False's B,
    # as large as A, makes T5 v1.1's all-linear gradients ill-conditioned (PEFT's own float32 gradients 1.9e-4 x RMS
    # from float64, test_forward_and_every_adapter_gradient_equal_peft) and the trajectory a test of that rounding.
    _, adapter = peft_adapter(family, variant, folder, tmp_path / "adapter", peft_init=True)
    records = make_records(4, [6], FAMILIES[family].random_model(seed=7).config.vocab_size, seed=1, eos=f.eos())
    k = train_knobs(optim)
    trainer, hf_logs = run_peft_trainer(family, folder, adapter, records, tmp_path / "hf-out", k)
    logs = run_fitsum_train(folder, records, tmp_path / "fitsum-out", k, "--adapter_name_or_path", adapter)

    assert len(logs) == STEPS and len(hf_logs) == STEPS
    for step, (got, (want, _), hf_log) in enumerate(zip(logs, trainer.micro, hf_logs), start=1):
        assert got["step"] == hf_log["step"] == step
        assert_close(got["loss"], want, 1e-4, f"step {step} loss")
        assert_close(got["grad_norm"], hf_log["grad_norm"], 1e-4, f"step {step} grad_norm")
    start = load_file(f"{adapter}/adapter_model.safetensors")
    final = load_file(str(tmp_path / "fitsum-out" / "adapter_model.safetensors"))
    want = get_peft_model_state_dict(trainer.model)
    assert set(final) == set(want), f"adapter tensors differ from PEFT's: {sorted(set(final) ^ set(want))}"
    for name, w in want.items():
        if not name.endswith("k_proj.bias"):
            assert float((w - start[name]).abs().max()) > 0, f"{name} did not train"
    exact, _ = run_peft_trainer(family, folder, adapter, records, tmp_path / "hf64-out", k, torch.float64)
    assert_final_adapter(final, trainer, exact)


def test_gradient_checkpointing_keeps_the_lora_trajectory(tmp_path):
    """fitsum's gradient checkpointing under a frozen base (the checkpointed layers' inputs need no gradient, the
    adapters inside do) gives the very run without it, bit for bit, and that run follows the Trainer's."""
    family, f = "t5_v1_1", FAMILIES["t5_v1_1"]
    folder = save_model(f.random_model(seed=7, shape="tiny"), tmp_path / "model")
    _, adapter = peft_adapter(family, "all-linear-rslora", folder, tmp_path / "adapter", peft_init=True)
    records = make_records(4, [6], f.random_model(seed=7).config.vocab_size, seed=1, eos=f.eos())
    k = train_knobs("adafactor")
    plain = run_fitsum_train(folder, records, tmp_path / "plain", k, "--adapter_name_or_path", adapter)
    logs = run_fitsum_train(folder, records, tmp_path / "checkpointed", k, "--adapter_name_or_path", adapter,
                            "--gradient_checkpointing")
    assert [e["loss"] for e in logs] == [e["loss"] for e in plain]
    final = load_file(str(tmp_path / "checkpointed" / "adapter_model.safetensors"))
    for name, w in load_file(str(tmp_path / "plain" / "adapter_model.safetensors")).items():
        assert torch.equal(final[name], w), f"checkpointed: {name} differs from the plain run's"
    trainer, _ = run_peft_trainer(family, folder, adapter, records, tmp_path / "hf-out", k)
    for step, (got, (want, _)) in enumerate(zip(logs, trainer.micro), start=1):
        assert_close(got["loss"], want, 1e-4, f"step {step} loss")
    exact, _ = run_peft_trainer(family, folder, adapter, records, tmp_path / "hf64-out", k, torch.float64)
    assert_final_adapter(final, trainer, exact, "checkpointed: ")


GENERATE_CASES = ([dict(num_beams=1, max_length=12), dict(num_beams=1, max_new_tokens=9, min_length=6)]
                  + [dict(num_beams=k, max_length=14, length_penalty=lp, early_stopping=es)
                     for k in (2, 4) for lp in (1.0, 0.8) for es in (True, "never")]
                  + [dict(num_beams=4, max_length=16, no_repeat_ngram_size=3, early_stopping=True)])


def compare_generate(tmp_path, hf_model, folder, ids, mask, f, what, adapter=None):
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps(GENERATE_CASES))
    extra = ["--adapter", adapter] if adapter else []
    out = tmp_path / f"{what}.json"
    probe("generate", "--model", folder, *extra, "--batch",
          save_batch(tmp_path / "src.safetensors", input_ids=ids, attention_mask=mask), "--cases", cases, "--out", out)
    failures = []
    for kwargs, result in zip(GENERATE_CASES, read_json(out)):
        sequences, scores = hf_generate(hf_model, ids, mask, kwargs)
        sequences = hf_padding_as_pad(sequences, kwargs, f.pad(), f.eos())
        if result["sequences"] != sequences.tolist():
            failures.append(f"{kwargs}: ids differ\n  fitsum {result['sequences']}\n  peft   {sequences.tolist()}")
        elif scores is not None:
            try:
                assert_close(torch.tensor(result["sequence_scores"]), scores, 1e-5, f"{kwargs} sequences_scores")
            except AssertionError as e:
                failures.append(str(e))
    assert not failures, f"{what}: {len(failures)} of {len(GENERATE_CASES)} cases differ:\n" + "\n".join(failures)


def generation_model(f):
    """A random model whose outputs the adapter changes: PEGASUS's and BART's without test_generate.py's raised eos
    (its final_logits_bias of 1.5 outweighs what an adapter does to the tiny random logits, so the base's ids would
    come out), T5's with its likely eos (a vocabulary of 17, the LM head scaled by 0.1)."""
    if f.name.startswith("t5"):
        return f.random_model_with_likely_eos(seed=f.generate_seeds[0])
    return f.random_model(seed=21, shape="tiny", vocab_size=61)


GENERATE = [("pegasus", "qv"), ("pegasus", "modules_to_save"), ("bart", "all-linear-rslora"), ("bart", "bias-all"),
            ("t5", "qv"), ("t5_v1_1", "all-linear-rslora")]


@pytest.mark.parametrize("family,variant", GENERATE, ids=[f"{f}-{v}" for f, v in GENERATE])
def test_generate_with_adapter_and_merged_equal_peft(tmp_path, family, variant):
    f = FAMILIES[family]
    folder = save_model(generation_model(f), tmp_path / "model")
    peft_model, adapter = peft_adapter(family, variant, folder, tmp_path / "adapter")
    peft_model.eval()
    ids, mask = sources(peft_model.config.vocab_size, seed=4, pad=f.pad(), eos=f.eos())
    base = f.model_class.from_pretrained(folder).eval()
    changed = sum(hf_generate(peft_model, ids, mask, kwargs)[0].tolist() != hf_generate(base, ids, mask, kwargs)[0]
                  .tolist() for kwargs in GENERATE_CASES)
    assert changed >= len(GENERATE_CASES) // 3, f"the adapter changes only {changed} outputs: the test would not see it"
    compare_generate(tmp_path, peft_model, folder, ids, mask, f, "with the adapter", adapter=adapter)

    merged = tmp_path / "merged"
    fitsum("merge", "--model", folder, "--adapter", adapter, "--output_dir", merged)
    reloaded = PeftModel.from_pretrained(f.model_class.from_pretrained(folder), adapter)
    peft_merged = reloaded.merge_and_unload().eval()
    fitsum_merged = f.model_class.from_pretrained(str(merged)).eval()
    want = peft_merged.state_dict()
    got = fitsum_merged.state_dict()
    assert set(got) == set(want), f"merged tensors differ: {sorted(set(got) ^ set(want))}"
    for name, w in want.items():
        assert_close(got[name], w, 1e-6, f"merged {name}")
    compare_generate(tmp_path, peft_merged, str(merged), ids, mask, f, "merged")


def peft_saved_config(family, variant, folder, tmp_path):
    """adapter_config.json as PEFT writes it for this LoraConfig on this folder."""
    f = FAMILIES[family]
    model = get_peft_model(f.model_class.from_pretrained(folder), LoraConfig(**lora_config(family, variant)))
    model.save_pretrained(tmp_path / "peft-written")
    return read_json(tmp_path / "peft-written" / "adapter_config.json"), get_peft_model_state_dict(model)


def fitsum_flags(family, variant):
    c = lora_config(family, variant)
    targets = c["target_modules"]
    flags = ["--lora_r", c["r"], "--lora_alpha", c["lora_alpha"], "--lora_target_modules",
             targets if isinstance(targets, str) else ",".join(targets)]
    if c.get("use_rslora"):
        flags.append("--use_rslora")
    if "bias" in c:
        flags += ["--lora_bias", c["bias"]]
    if "modules_to_save" in c:
        flags += ["--lora_modules_to_save", ",".join(c["modules_to_save"])]
    return flags


@pytest.mark.parametrize("family,variant", CASES, ids=[f"{f}-{v}" for f, v in CASES])
def test_peft_loads_fitsum_adapter(tmp_path, family, variant):
    """`fitsum train --lora_r ...` writes the adapter PEFT writes: the same config fields and values (target_modules
    compared as the set PEFT keeps), the same tensor keys, safetensors metadata {"format": "pt"};
    PeftModel.from_pretrained loads it without a missing or unexpected key and computes fitsum's logits with it."""
    f = FAMILIES[family]
    folder = save_model(f.random_model(seed=13, shape="tiny"), tmp_path / "model")
    records = make_records(4, [6], f.random_model(seed=13).config.vocab_size, seed=2, eos=f.eos())
    out = tmp_path / "fitsum-out"
    run_fitsum_train(folder, records, out, train_knobs("adamw_torch") | dict(max_steps=2), *fitsum_flags(family,
                                                                                                        variant))
    want_config, want_tensors = peft_saved_config(family, variant, folder, tmp_path)
    got_config = read_json(out / "adapter_config.json")
    assert set(got_config) == set(want_config), f"fields differ: {sorted(set(got_config) ^ set(want_config))}"
    for key, want in want_config.items():
        got = got_config[key]
        if key == "target_modules":
            got, want = sorted(got), sorted(want)
        if key == "peft_version":
            continue  # PEFT writes its own version; fitsum the version whose format it writes
        assert got == want, f"adapter_config.json {key}: fitsum {got!r}, PEFT {want!r}"
    with safe_open(str(out / "adapter_model.safetensors"), "pt") as file:
        assert file.metadata() == {"format": "pt"}
        keys = set(file.keys())
    assert keys == set(want_tensors), f"tensor keys differ from PEFT's: {sorted(keys ^ set(want_tensors))}"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = PeftModel.from_pretrained(f.model_class.from_pretrained(folder), str(out))
    complaints = [str(w.message) for w in caught if "key" in str(w.message).lower()]
    assert not complaints, f"PEFT complains loading fitsum's adapter: {complaints}"
    saved = load_file(str(out / "adapter_model.safetensors"))
    for name, value in get_peft_model_state_dict(loaded).items():
        assert torch.equal(value, saved[name]), f"PEFT holds another {name} than fitsum saved"
        if ".lora_B." in name:
            assert float(value.abs().max()) > 0, f"{name} is still zero after 2 steps"

    loaded.eval()
    input_ids, attention_mask, labels = make_batch(loaded.config.vocab_size, 2, 11, 7, seed=6, pad=f.pad(),
                                                   eos=f.eos())
    with torch.no_grad():
        want = loaded(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    probe("forward", "--model", folder, "--adapter", out, "--batch",
          save_batch(tmp_path / "batch.safetensors", input_ids=input_ids, attention_mask=attention_mask,
                     labels=labels), "--out", tmp_path / "fitsum.safetensors")
    got = load_file(str(tmp_path / "fitsum.safetensors"))
    assert_close(got["logits"], want.logits, 1e-4, "logits of fitsum's adapter, PEFT against fitsum")
    assert_close(got["loss"][0], want.loss, 1e-5, "loss of fitsum's adapter, PEFT against fitsum")
    assert PeftConfig.from_pretrained(str(out)).base_model_name_or_path == folder
