#!/usr/bin/env python3
"""Reference values for LongT5's encoder pieces, computed by transformers' own modeling_longt5.py.

Writes tests/data/fixtures/long-t5-layer/reference.safetensors (read by tests/model/long_t5_attention_test.cpp) with
the versions and the configuration in its metadata (`generated_by`, `config`). For each encoder_attention_type
(`local`, and `tglobal` for "transient-global"):

  <type>.<key>          the weights of a seeded random encoder LongT5Stack (d_model 32, d_kv 8, 4 heads, d_ff 64,
                        gated-gelu, 2 layers, local_radius 3, global_block_size 4, 8 buckets, max_distance 16) under
                        its state_dict keys (embed_tokens left out); its RMSNorm weights are randomized too, so that
                        their gradients are not trivial
  <type>.out, <type>.grad_out, <type>.grad.input.embeds, <type>.grad.<key>
                        last_hidden_state (eval mode), the upstream gradient used, and the gradients of inputs_embeds
                        and of every parameter
  <type>.position_bias  what block 0 passes to block 1 (the shared bias with the masks folded in)
  <type>.dropout.out, <type>.dropout.grad.input.embeds
                        the same encoder in training mode with dropout_rate 0.1 after torch.manual_seed(4555), for the
                        same upstream gradient (torch.dropout's masks, which LibTorch draws alike from the same seed)
  <type>.short.{mask,out,grad.input.embeds}
                        the eval encoder on the first 3 positions (row 1 with 1 padding position): shorter than one
                        block and than one global block, so transient-global attention has no side keys
  input.embeds          (2, 11, 32) inputs_embeds: 11 is not a multiple of the block length 4 nor of the global block 4
  input.attention_mask  (2, 11) int64: row 1 has 5 padding positions
  ids.<case>.{mask,block_ids,segment_ids,local_mask}
                        _make_global_fixed_block_ids (global block size 3 and 4) and _get_local_attention_mask (block
                        length 4) for a few masks

Run from the project root with the venv of `make test-hf` (Debian's torch 1.13 + transformers 4.47.1):

    build/hf-venv/bin/python tests/data/make_long_t5_fixtures.py

Nothing is downloaded. transformers 5's modeling_longt5.py computes the same (its local and transient-global
attention, block helpers and feed-forward differ only in signatures, head masks and returned tuples): with this file's
weights loaded, transformers 5.23 on torch 2.14 gives its outputs and every gradient (eval and dropout cases) within
1e-6 of their largest magnitude. It initializes other random weights for the same seed, so regenerate with 4.47.
"""
import json
import os

import safetensors
import torch
import transformers
from safetensors.torch import save_file
from transformers import LongT5Config
from transformers.models.longt5.modeling_longt5 import (LongT5Stack, _get_local_attention_mask,
                                                        _make_global_fixed_block_ids)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "long-t5-layer")
CONFIG = dict(vocab_size=50, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=1, num_heads=4,
              local_radius=3, global_block_size=4, relative_attention_num_buckets=8,
              relative_attention_max_distance=16, dropout_rate=0.0, layer_norm_epsilon=1e-6,
              feed_forward_proj="gated-gelu", is_encoder_decoder=True, use_cache=False)
TYPES = {"local": "local", "tglobal": "transient-global"}
SEED = 4501
DROPOUT = dict(dropout_rate=0.1, seed=4555)


def randomize_norms(module, g):
    """RMSNorm weights start at 1: perturb them so every gradient is informative."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "layer_norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))


def capture_position_bias(stack):
    captured = {}

    def record(_module, _args, outputs):
        captured["bias"] = outputs[-1].detach().clone()
    return captured, stack.block[0].register_forward_hook(record)


def encoder_case(kind, embeds, mask, g, out):
    torch.manual_seed(SEED + len(kind))
    config = LongT5Config(**CONFIG, encoder_attention_type=TYPES[kind])
    config.is_decoder = False
    stack = LongT5Stack(config)
    randomize_norms(stack, g)
    stack.eval()
    for name, tensor in stack.state_dict().items():
        if name != "embed_tokens.weight":
            out[f"{kind}.{name}"] = tensor.clone()
    captured, handle = capture_position_bias(stack)
    x = embeds.clone().requires_grad_(True)
    hidden = stack(inputs_embeds=x, attention_mask=mask, use_cache=False).last_hidden_state
    handle.remove()
    grad_out = torch.randn(hidden.shape, generator=g)
    stack.zero_grad()
    (hidden * grad_out).sum().backward()
    out[f"{kind}.out"] = hidden.detach()
    out[f"{kind}.grad_out"] = grad_out
    out[f"{kind}.grad.input.embeds"] = x.grad
    out[f"{kind}.position_bias"] = captured["bias"]
    for name, p in stack.named_parameters():
        if p.grad is not None:  # embed_tokens is not used with inputs_embeds
            out[f"{kind}.grad.{name}"] = p.grad.clone()
    dropout_case(kind, stack, embeds, mask, grad_out, out)
    short_case(kind, stack, embeds, grad_out, out)


def short_case(kind, stack, embeds, grad_out, out):
    """3 positions: shorter than one block and than one global block (no side keys at all)."""
    x = embeds[:, :3].clone().requires_grad_(True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    stack.zero_grad()
    hidden = stack(inputs_embeds=x, attention_mask=mask, use_cache=False).last_hidden_state
    (hidden * grad_out[:, :3]).sum().backward()
    out[f"{kind}.short.mask"] = mask
    out[f"{kind}.short.out"] = hidden.detach()
    out[f"{kind}.short.grad.input.embeds"] = x.grad


def dropout_case(kind, stack, embeds, mask, grad_out, out):
    config = LongT5Config(**{**CONFIG, "dropout_rate": DROPOUT["dropout_rate"]}, encoder_attention_type=TYPES[kind])
    config.is_decoder = False
    dropped = LongT5Stack(config)
    dropped.load_state_dict(stack.state_dict())
    dropped.train()
    x = embeds.clone().requires_grad_(True)
    torch.manual_seed(DROPOUT["seed"])
    hidden = dropped(inputs_embeds=x, attention_mask=mask, use_cache=False).last_hidden_state
    (hidden * grad_out).sum().backward()
    out[f"{kind}.dropout.out"] = hidden.detach()
    out[f"{kind}.dropout.grad.input.embeds"] = x.grad


def id_cases(out):
    masks = {"full11": torch.ones(2, 11, dtype=torch.long), "short3": torch.ones(1, 3, dtype=torch.long)}
    ragged = torch.ones(3, 13, dtype=torch.long)
    ragged[1, 9:] = 0
    ragged[2, 2:] = 0
    masks["ragged13"] = ragged
    for name, mask in masks.items():
        for block in (3, 4):
            ids, segments = _make_global_fixed_block_ids(mask, block)
            out[f"ids.{name}.g{block}.block_ids"] = ids.long()
            out[f"ids.{name}.g{block}.segment_ids"] = segments.long()
        out[f"ids.{name}.mask"] = mask
        out[f"ids.{name}.local_mask"] = _get_local_attention_mask(mask, 4, "cpu").to(torch.uint8)


def main():
    g = torch.Generator().manual_seed(SEED)
    embeds = torch.randn(2, 11, 32, generator=g)
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, 6:] = 0
    out = {"input.embeds": embeds, "input.attention_mask": mask}
    for kind in TYPES:
        encoder_case(kind, embeds, mask, g, out)
    id_cases(out)
    versions = {"transformers": transformers.__version__, "torch": torch.__version__,
                "safetensors": safetensors.__version__}
    metadata = {"format": "pt", "generated_by": json.dumps(versions), "config": json.dumps(CONFIG, sort_keys=True),
                "dropout": json.dumps(DROPOUT, sort_keys=True)}
    os.makedirs(OUT, exist_ok=True)
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(OUT, "reference.safetensors"), metadata)
    print(f"wrote {len(out)} tensors to {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
