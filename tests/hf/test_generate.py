"""generate(): fitsum's greedy and beam search return the same token ids and the same beam scores
(sequences_scores) as transformers' generate() on the same HF folder, for num_beams 1..8, length_penalty,
min_length, max_length / max_new_tokens, no_repeat_ngram_size and early_stopping True / False / "never"."""
import json

import pytest
import torch
import transformers
from packaging.version import Version

from harness import FAMILIES, assert_close, probe, read_json, save_batch, save_model, shared_path

PEGASUS = FAMILIES["pegasus"]
# transformers 4.50 rewrote beam search (vectorised). Two things changed that fitsum, which follows 4.37-4.49, does not
# copy (docs/hf.md):
# - finished beam outputs are padded with `pad_token_id or eos_token_id[0]`, which takes eos when pad_token_id is 0
#   (PEGASUS's), so the ids after a hypothesis's </s> are </s> instead of <pad>;
# - with early_stopping=False and a positive length_penalty, when to stop uses the best running beam's score instead
#   of the best candidate's, which changes the outcome in the case listed below.
HF_VECTORISED_BEAMS = Version(transformers.__version__) >= Version("4.50")
# Per random model (family, seed): the cases whose outcome that changes.
# - a hypothesis still open at max_length is divided by all its generated tokens (4.37-4.49: one fewer), so it beats
#   a finished one more often: longt5_local's seed 21 (on transformers 5.23) holds an open 13-token beam of summed
#   log-probability -25.53 against a finished 10-token one of -19.91: -25.53 / 13 = -1.964 wins over -19.91 / 10 =
#   -1.991 where -25.53 / 12 = -2.127 loses.
CHANGED_BY_VECTORISED_BEAMS = {
    ("pegasus", 21): [dict(num_beams=4, max_length=12, length_penalty=2.0, early_stopping=False)],
    ("bart", 21): [dict(num_beams=4, max_length=12, length_penalty=2.0, early_stopping=False)],
    # the stopping rule (early_stopping False, length_penalty 1.0): transformers 5.23 stops a step earlier
    ("pegasus_x", 21): [dict(num_beams=3, max_length=15, min_length=8)],
    # the open hypothesis's length (above)
    ("longt5_local", 21): [dict(num_beams=k, max_length=14, length_penalty=1.0, early_stopping=True) for k in (7, 8)],
}


def hf_padding_as_pad(sequences, kwargs, pad=0, eos=1):
    """HF >= 4.50's beam outputs with the positions after each sequence's first </s> checked to hold </s> and
    given back as <pad>, the id transformers < 4.50 and fitsum write there."""
    if not HF_VECTORISED_BEAMS or kwargs.get("num_beams", 1) == 1 or pad != 0:
        return sequences  # a non-zero pad_token_id (BART's 1) survives the `or`: HF pads with it, as fitsum does
    out = sequences.clone()
    for row in out:
        ends = (row[1:] == eos).nonzero()
        if len(ends):
            first = int(ends[0]) + 1
            assert bool((row[first + 1:] == eos).all()), f"{kwargs}: HF pads a finished beam with other than </s>"
            row[first + 1:] = pad
    return out


def sources(vocab, seed, batch=4, length=14, pad=0, eos=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, vocab, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    for b in range(batch):
        n = length - 2 * b
        ids[b, n - 1] = eos
        ids[b, n:] = pad
        mask[b, n:] = 0
    return ids, mask


CASES = (
    [dict(num_beams=1, max_length=12), dict(num_beams=1, max_new_tokens=9, min_length=6),
     dict(num_beams=1, max_length=16, no_repeat_ngram_size=2), dict(num_beams=1, max_length=10, use_cache=False)]
    + [dict(num_beams=k, max_length=14, length_penalty=lp, early_stopping=es)
       for k in (2, 3, 4, 5, 6, 7, 8) for lp in (1.0, 0.8) for es in (False, True, "never")]
    + [dict(num_beams=4, max_length=12, length_penalty=lp, early_stopping=es)
       for lp in (0.0, -0.5, 2.0) for es in (False, "never")]
    + [dict(num_beams=3, max_length=15, min_length=8), dict(num_beams=5, max_new_tokens=7),
       dict(num_beams=4, max_length=16, no_repeat_ngram_size=3, length_penalty=0.8),
       dict(num_beams=2, max_length=9, no_repeat_ngram_size=1), dict(num_beams=8, max_length=12, use_cache=False)]
)


def hf_generate(model, ids, mask, kwargs):
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, output_scores=True, return_dict_in_generate=True,
                             **kwargs)
    scores = getattr(out, "sequences_scores", None)
    return out.sequences, scores


def compare(tmp_path, model, folder, ids, mask, cases, pad=0, eos=1, changed=(), score_rel=1e-5):
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    probe("generate", "--model", folder, "--batch", save_batch(tmp_path / "src.safetensors", input_ids=ids,
          attention_mask=mask), "--cases", tmp_path / "cases.json", "--out", tmp_path / "out.json")
    got = read_json(tmp_path / "out.json")
    assert len(got) == len(cases)
    failures = []
    for kwargs, result in zip(cases, got):
        sequences, scores = hf_generate(model, ids, mask, kwargs)
        sequences = hf_padding_as_pad(sequences, kwargs, pad, eos)
        if HF_VECTORISED_BEAMS and kwargs in changed:
            # Documented: the outcome follows transformers < 4.50 here; it must still differ from 4.50's.
            if result["sequences"] == sequences.tolist():
                failures.append(f"{kwargs}: now equal to transformers >= 4.50")
            continue
        if result["sequences"] != sequences.tolist():
            failures.append(f"{kwargs}: ids differ\n  fitsum {result['sequences']}\n  hf     {sequences.tolist()}")
            continue
        if scores is not None:
            try:
                assert_close(torch.tensor(result["sequence_scores"]), scores, score_rel, f"{kwargs} sequences_scores")
            except AssertionError as e:
                failures.append(str(e))
    assert not failures, f"{len(failures)} of {len(cases)} cases differ:\n" + "\n".join(failures)


@pytest.mark.parametrize("family,seed", [(name, seed) for name, f in FAMILIES.items() for seed in f.generate_seeds])
def test_random_model_with_likely_eos(tmp_path, family, seed):
    f = FAMILIES[family]
    model = f.random_model_with_likely_eos(seed=seed)
    folder = save_model(model, tmp_path / "model")
    ids, mask = sources(model.config.vocab_size, seed=4, pad=f.pad(), eos=f.eos())
    compare(tmp_path, model, folder, ids, mask, CASES, pad=f.pad(), eos=f.eos(),
            changed=CHANGED_BY_VECTORISED_BEAMS.get((family, seed), []))


def test_trained_copy_task_checkpoint(tmp_path):
    """The fixture checkpoint was trained to copy its input, so greedy and beam outputs end with eos early."""
    folder = shared_path("fixtures", "tiny-pegasus")
    model = PEGASUS.model_class.from_pretrained(folder).eval()
    case = read_json(f"{folder}/case.json")
    ids = torch.tensor(case["greedy"]["input_ids"])
    mask = torch.tensor(case["greedy"]["attention_mask"])
    cases = [dict(num_beams=1, max_length=16)] + [
        dict(num_beams=k, max_length=16, length_penalty=lp, early_stopping=es, min_length=ml)
        for k in (2, 4, 8) for lp in (1.0, 0.6) for es in (False, True, "never") for ml in (0, 10)]
    compare(tmp_path, model, folder, ids, mask, cases)


LONG_CASES = [dict(num_beams=1, max_length=10), dict(num_beams=4, max_length=10, length_penalty=0.8),
              dict(num_beams=3, max_length=10, no_repeat_ngram_size=2),
              dict(num_beams=2, max_length=8, use_cache=False)]


# PEGASUS-X's default init_std (0.02) keeps each attention's output small against the scaled embeddings, so that the
# global tokens hardly move the encoder's states; a larger one lets them decide the outputs.
LONG_INIT = {"pegasus_x": dict(init_std=0.3)}


@pytest.mark.parametrize("family", ["pegasus_x", "longt5_local", "longt5_tglobal"])
def test_long_padded_source(tmp_path, family):
    """The real checkpoints' block structure (test_forward.py's LONG_INPUT) at 4001 source tokens, the second row padded
    from 2777: the encoder's blocks, global tokens and padding reach every step's cross-attention, cached and not. A
    random model's cross-attention spreads over the 4001 positions and averages the encoder's states away, so its
    queries are scaled up: each step then reads a few positions, and their states decide the ids and scores. That
    sharpness also scales float32's rounding: PEGASUS-X's beam scores differ from transformers 5.23's (torch 2.14) by
    up to 1.9e-5 relative, so they are compared within 1e-4 (a lost global-token LayerNorm changes the ids)."""
    from test_forward import LONG_INPUT
    f = FAMILIES[family]
    model = f.random_model(seed=17, shape="tiny", **LONG_INPUT[family], **LONG_INIT.get(family, {}))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "encoder_attn.q_proj" in name or "EncDecAttention.q." in name:
                p.mul_(30.0)
    folder = save_model(model, tmp_path / "model")
    ids, mask = sources(model.config.vocab_size, seed=8, batch=2, length=4001, pad=f.pad(), eos=f.eos())
    ids[1, 2776] = f.eos()
    ids[1, 2777:] = f.pad()
    mask[1, 2777:] = 0
    compare(tmp_path, model, folder, ids, mask, LONG_CASES, pad=f.pad(), eos=f.eos(), score_rel=1e-4)
