"""PEGASUS, BART, T5, T5 v1.1, mT5, PEGASUS-X and LongT5 forward and backward: fitsum's logits, loss and the gradient
of every trainable parameter (the shared embedding's pad row included) equal transformers' on the same HF folder and
batch, at several shapes and at 4096 source tokens, through Seq2SeqLM::forward and through the fused training path."""
import copy

import pytest
import torch

from harness import FAMILIES, assert_close, load_file, probe, rms, save_batch, save_model

FAMILY_NAMES = ["pegasus", "bart", "t5", "t5_v1_1", "mt5", "pegasus_x", "longt5_local", "longt5_tglobal"]


def make_batch(vocab, batch, source, target, seed, pad=0, eos=1):
    """Random ids in [3, vocab) (none of the families' special ids 0..2) with eos last; rows after the first are shorter (padding in the source, -100 in the
    labels), and the pad token also occurs inside one source so that its embedding row is looked up."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, vocab, (batch, source), generator=g)
    labels = torch.randint(3, vocab, (batch, target), generator=g)
    attention_mask = torch.ones(batch, source, dtype=torch.long)
    for b in range(batch):
        s = max(3, source - 2 * b)
        t = max(2, target - 2 * b)
        input_ids[b, s - 1] = eos
        input_ids[b, s:] = pad
        attention_mask[b, s:] = 0
        labels[b, t - 1] = eos
        labels[b, t:] = -100
    input_ids[0, 1] = pad  # a pad token the encoder attends to
    return input_ids, attention_mask, labels


CASES = [
    ("tiny", 3, 13, 9),
    ("odd_heads_gelu", 2, 17, 6),
    ("deep_decoder", 4, 8, 11),
    ("tiny", 1, 30, 20),
]


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("shape,batch,source,target", CASES, ids=[f"{c[0]}-b{c[1]}-s{c[2]}-t{c[3]}" for c in CASES])
def test_logits_loss_and_every_gradient_equal_transformers(tmp_path, family, shape, batch, source, target):
    f = FAMILIES[family]
    model = f.random_model(seed=11, shape=shape)
    folder = save_model(model, tmp_path / "model")
    input_ids, attention_mask, labels = make_batch(model.config.vocab_size, batch, source, target, seed=5,
                                                   pad=f.pad(), eos=f.eos())

    model.train()  # as the Trainer runs it; every dropout is 0
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    out.loss.backward()
    hf_grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}

    probe("forward", "--model", folder, "--batch", save_batch(tmp_path / "batch.safetensors", input_ids=input_ids,
          attention_mask=attention_mask, labels=labels), "--out", tmp_path / "fitsum.safetensors")
    got = load_file(str(tmp_path / "fitsum.safetensors"))

    assert_close(got["loss"][0], out.loss.detach(), 1e-5, "loss")
    assert_close(got["train_loss"][0], out.loss.detach(), 1e-5, "loss (training path)")
    assert_close(got["logits"], out.logits.detach(), 1e-4, "logits")
    fitsum_names = {k[len("grad."):] for k in got if k.startswith("grad.")}
    assert fitsum_names == set(hf_grads), f"trainable parameters differ: {fitsum_names ^ set(hf_grads)}"
    for name, want in hf_grads.items():
        if name.endswith("k_proj.bias"):
            # Mathematically zero (a constant added to every key score leaves the softmax alone): both sides hold
            # rounding noise, which must stay far below the neighbouring v_proj.bias gradient.
            scale = rms(hf_grads[name.replace("k_proj", "v_proj")])
            for prefix in ("grad.", "train_grad."):
                assert float(got[prefix + name].abs().max()) <= 1e-4 * scale, f"{prefix}{name} is not ~0"
            continue
        assert_close(got["grad." + name], want, 1e-4, f"d loss / d {name}")
        assert_close(got["train_grad." + name], want, 1e-4, f"d loss / d {name} (training path)")


# T5's embedding has no padding_idx: its pad row learns like any other, which the gradient test above checks.
@pytest.mark.parametrize("family", ["pegasus", "bart"])
def test_pad_row_learns_only_through_the_lm_head(tmp_path, family):
    """nn.Embedding(padding_idx=pad): lookups of the pad token (source padding; PEGASUS's decoder start token) add
    nothing to the pad row; only the tied LM head does. Checked against HF with the LM head's share computed apart."""
    f = FAMILIES[family]
    pad = f.pad()
    model = f.random_model(seed=3, shape="tiny")
    folder = save_model(model, tmp_path / "model")
    input_ids, attention_mask, labels = make_batch(model.config.vocab_size, 2, 12, 7, seed=9, pad=pad, eos=f.eos())
    model.train()
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    out.loss.backward()
    hf_row = model.model.shared.weight.grad[pad].clone()

    # The LM head's share alone: d loss / d W through logits = hidden @ W^T, with the decoder states held fixed.
    model.zero_grad()
    with torch.no_grad():
        hidden = model.model(input_ids=input_ids, attention_mask=attention_mask,
                             decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels)).last_hidden_state
    weight = model.model.shared.weight.detach().clone().requires_grad_(True)
    logits = hidden @ weight.T + model.final_logits_bias
    torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1)).backward()
    assert_close(hf_row, weight.grad[pad], 1e-5, "HF's pad-row gradient is the LM head's share")

    probe("forward", "--model", folder, "--batch", save_batch(tmp_path / "batch.safetensors", input_ids=input_ids,
          attention_mask=attention_mask, labels=labels), "--out", tmp_path / "fitsum.safetensors")
    got = load_file(str(tmp_path / "fitsum.safetensors"))
    assert_close(got["grad.model.shared.weight"][pad], hf_row, 1e-4, "pad row of d loss / d model.shared.weight")
    assert_close(got["train_grad.model.shared.weight"][pad], hf_row, 1e-4, "pad row (training path)")


# The real checkpoints' block structure at 4096 source tokens: PEGASUS-X's 512-position blocks (staggered in every
# other layer) with 128 global tokens (google/pegasus-x-base and -large), LongT5's local_radius 127 (blocks of 128)
# and global blocks of 16. The widths stay tiny so that a case takes a few seconds. The padded row's length (2777)
# and the second width (4001) are multiples of none of the block sizes, so the last block of a row and of the batch
# is partial.
# A gradient here sums over 8,000 positions, and float32 rounds it by more than the short cases' 1e-4 x RMS: on
# transformers 5.23 (torch 2.14) the first layer's fc1.weight gradient of PEGASUS-X is 1.7e-3 x RMS away from the
# same model's in float64, and fitsum's float32 one up to 1.8e-3 x RMS (on another tensor, where transformers' is
# exact). So the exact check runs both models in float64 (the probe's --dtype float64; LongT5's norms compute in
# float32 on both sides, 1e-6 x RMS): every gradient within 1e-5 x RMS; the float32 runs, the training path included,
# keep the loss and logits at the short cases' bounds and every gradient within 1e-2 x RMS of the float64 one. A
# wrong block, stagger or global token is off by the order of the RMS.
LONG_INPUT = {
    "pegasus_x": dict(block_size=512, num_global_tokens=128, stagger_local_blocks=True, max_position_embeddings=16384),
    "longt5_local": dict(local_radius=127, global_block_size=16),
    "longt5_tglobal": dict(local_radius=127, global_block_size=16),
}


@pytest.mark.parametrize("family", list(LONG_INPUT))
@pytest.mark.parametrize("source", [4096, 4001])
def test_long_padded_input_equals_transformers(tmp_path, family, source):
    f = FAMILIES[family]
    model = f.random_model(seed=13, shape="tiny", **LONG_INPUT[family])
    folder = save_model(model, tmp_path / "model")
    input_ids, attention_mask, labels = make_batch(model.config.vocab_size, 2, source, 7, seed=6, pad=f.pad(),
                                                   eos=f.eos())
    padded = 2777  # the second row: its own eos, then padding up to the batch's width
    input_ids[1, padded - 1] = f.eos()
    input_ids[1, padded:] = f.pad()
    attention_mask[1, padded:] = 0

    exact = copy.deepcopy(model).double()
    grads = {}
    for m in (exact, model):  # the float32 model last: its output is compared below
        m.train()
        # torch 1.13's torch.full(..., finfo(float64).min) without a dtype makes a float32 tensor (overflow) in
        # transformers 4.47's causal mask: the float64 model runs under float64 as the default dtype.
        default = torch.get_default_dtype()
        torch.set_default_dtype(next(m.parameters()).dtype)
        try:
            out = m(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        finally:
            torch.set_default_dtype(default)
        out.loss.backward()
        grads[m] = {n: p.grad.double() for n, p in m.named_parameters() if p.requires_grad}
    batch = save_batch(tmp_path / "batch.safetensors", input_ids=input_ids, attention_mask=attention_mask,
                       labels=labels)
    probe("forward", "--model", folder, "--batch", batch, "--out", tmp_path / "fitsum.safetensors")
    probe("forward", "--model", folder, "--batch", batch, "--dtype", "float64", "--out",
          tmp_path / "fitsum64.safetensors")
    got = load_file(str(tmp_path / "fitsum.safetensors"))
    got64 = load_file(str(tmp_path / "fitsum64.safetensors"))

    assert_close(got["loss"][0], out.loss.detach(), 1e-5, "loss")
    assert_close(got["train_loss"][0], out.loss.detach(), 1e-5, "loss (training path)")
    assert_close(got["logits"], out.logits.detach(), 1e-4, "logits")
    assert {k[len("grad."):] for k in got64 if k.startswith("grad.")} == set(grads[exact])
    for name, want in grads[exact].items():
        assert_close(got64["grad." + name], want, 1e-5, f"d loss / d {name} (float64)")
        assert_close(got["grad." + name], want, 1e-2, f"d loss / d {name} (float32)")
        assert_close(got["train_grad." + name], want, 1e-2, f"d loss / d {name} (float32, training path)")
