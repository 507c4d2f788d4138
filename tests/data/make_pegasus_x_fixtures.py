#!/usr/bin/env python3
"""Reference values for PEGASUS-X's encoder pieces, computed by transformers' own modeling_pegasus_x.py.

Writes tests/data/fixtures/pegasus-x-layer/reference.safetensors (read by tests/model/pegasus_x_attention_test.cpp)
with the versions and the configuration in its metadata (`generated_by`, `config`):

  encoder.*            the weights of a seeded random PegasusXEncoder (d_model 32, 4 heads, ffn 64, block_size 4,
                       2 global tokens, 2 layers, stagger_local_blocks), under its state_dict keys; its LayerNorms
                       and global-token embedding are randomized too, so that their gradients are not trivial
  input.embeds         (2, 10, 32) inputs_embeds: a length that is not a multiple of block_size
  input.attention_mask (2, 10) int64: row 1 has 3 padding positions
  capture.layers.N.*   what PegasusXEncoder.forward passes to layer N (hidden (2, 12, 32) padded to the blocks with
                       the positions added, global (2, 2, 32), the additive mask (2, 12))
  encoder.out, encoder.grad_out, encoder.grad.*
                       last_hidden_state, the upstream gradient used, and the gradients of inputs_embeds
                       (encoder.grad.input.embeds) and of every parameter
  layer.{plain,stagger}.*
                       PegasusXEncoderLayer (the weights of encoder layer 1) with stagger_blocks_this_layer False and
                       True on capture.layers.1: out.hidden, out.global, grad.input.hidden, grad.input.global and
                       grad.<parameter> for the upstream gradients layer.grad_out.hidden, layer.grad_out.global
                       (eval mode)
  dropout.*            the staggered layer in training mode with dropout 0.1, attention_dropout 0.2,
                       activation_dropout 0.3 after torch.manual_seed(dropout.seed): out.hidden, out.global and the
                       input gradients (torch.dropout's masks, which LibTorch draws alike from the same seed)
  positions.*          PegasusXSinusoidalPositionalEmbedding: width 32 at positions 0..39 and 16380..16387, width 6
                       at positions 0..9 (float32)

Run from the project root with the venv of `make test-hf` (Debian's torch 1.13 + transformers 4.47.1):

    build/hf-venv/bin/python tests/data/make_pegasus_x_fixtures.py

Nothing is downloaded. transformers 5's modeling_pegasus_x.py computes the same (its encoder layer, attention and
positions differ only in signatures and returned attentions).
"""
import json
import os

import safetensors
import torch
import transformers
from safetensors.torch import save_file
from transformers import PegasusXConfig
from transformers.models.pegasus_x.modeling_pegasus_x import (PegasusXEncoder, PegasusXEncoderLayer,
                                                              PegasusXSinusoidalPositionalEmbedding)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "pegasus-x-layer")
CONFIG = dict(vocab_size=50, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, block_size=4, num_global_tokens=2,
              stagger_local_blocks=True, activation_function="gelu", dropout=0.0, attention_dropout=0.0,
              activation_dropout=0.0, init_std=0.2, max_position_embeddings=64)
DROPOUT = dict(dropout=0.1, attention_dropout=0.2, activation_dropout=0.3, seed=4455)
SEED = 4401


def randomize_norms(module, g):
    """LayerNorms start at (1, 0) and the global embedding at init_std: perturb them so every gradient is informative."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "layer_norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "layer_norm" in name and name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name == "embed_global.weight":
                p.copy_(torch.randn(p.shape, generator=g))


def capture_layer_inputs(encoder):
    """What the encoder passes to each layer (positionally: hidden, global, mask), recorded by pre-hooks."""
    captured = {}

    def hook(index):
        def record(_module, args):
            captured[index] = [a.detach().clone() for a in args[:3]]
        return record
    handles = [layer.register_forward_pre_hook(hook(i)) for i, layer in enumerate(encoder.layers)]
    return captured, handles


def encoder_case(encoder, embeds, mask, g, out):
    captured, handles = capture_layer_inputs(encoder)
    x = embeds.clone().requires_grad_(True)
    hidden = encoder(inputs_embeds=x, attention_mask=mask).last_hidden_state
    for h in handles:
        h.remove()
    grad_out = torch.randn(hidden.shape, generator=g)
    encoder.zero_grad()
    (hidden * grad_out).sum().backward()
    out["encoder.out"] = hidden.detach()
    out["encoder.grad_out"] = grad_out
    out["encoder.grad.input.embeds"] = x.grad
    for name, p in encoder.named_parameters():
        if p.grad is not None:  # embed_tokens is not used with inputs_embeds
            out["encoder.grad." + name] = p.grad.clone()
    for i, (h, glob, m) in captured.items():
        out[f"capture.layers.{i}.hidden"] = h
        out[f"capture.layers.{i}.global"] = glob
        out[f"capture.layers.{i}.mask"] = m
    return captured


def run_layer(layer, hidden, glob, mask, grad_h, grad_g, prefix, out):
    h = hidden.clone().requires_grad_(True)
    gl = glob.clone().requires_grad_(True)
    layer.zero_grad()
    new_h, new_g = layer(h, gl, mask)[:2]
    ((new_h * grad_h).sum() + (new_g * grad_g).sum()).backward()
    out[prefix + "out.hidden"] = new_h.detach()
    out[prefix + "out.global"] = new_g.detach()
    out[prefix + "grad.input.hidden"] = h.grad
    out[prefix + "grad.input.global"] = gl.grad
    return layer


def layer_cases(config, encoder, captured, g, out):
    hidden, glob, mask = captured[1]
    grad_h = torch.randn(hidden.shape, generator=g)
    grad_g = torch.randn(glob.shape, generator=g)
    out["layer.grad_out.hidden"] = grad_h
    out["layer.grad_out.global"] = grad_g
    for stagger in (False, True):
        prefix = "layer.stagger." if stagger else "layer.plain."
        layer = PegasusXEncoderLayer(stagger_blocks_this_layer=stagger, config=config)
        layer.load_state_dict(encoder.layers[1].state_dict())
        layer.eval()
        run_layer(layer, hidden, glob, mask, grad_h, grad_g, prefix, out)
        for name, p in layer.named_parameters():
            out[prefix + "grad." + name] = p.grad.clone()
    # Training mode with every dropout on: the staggered layer, the same weights and inputs.
    dropped = PegasusXConfig(**{**CONFIG, **{k: v for k, v in DROPOUT.items() if k != "seed"}})
    layer = PegasusXEncoderLayer(stagger_blocks_this_layer=True, config=dropped)
    layer.load_state_dict(encoder.layers[1].state_dict())
    layer.train()
    torch.manual_seed(DROPOUT["seed"])
    run_layer(layer, hidden, glob, mask, grad_h, grad_g, "dropout.", out)


def position_cases(out):
    for width, past, length in ((32, 0, 40), (32, 16380, 8), (6, 0, 10)):
        table = PegasusXSinusoidalPositionalEmbedding(width)(torch.zeros(1, length, width), past)[0]
        out[f"positions.d{width}.p{past}"] = table.contiguous()


def main():
    torch.manual_seed(SEED)
    config = PegasusXConfig(**CONFIG)
    encoder = PegasusXEncoder(config)
    g = torch.Generator().manual_seed(SEED + 1)
    randomize_norms(encoder, g)
    encoder.eval()
    embeds = torch.randn(2, 10, 32, generator=g)
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 7:] = 0
    out = {"input.embeds": embeds, "input.attention_mask": mask}
    for name, tensor in encoder.state_dict().items():
        if name != "embed_tokens.weight":
            out["encoder." + name] = tensor.clone()
    captured = encoder_case(encoder, embeds, mask, g, out)
    layer_cases(config, encoder, captured, g, out)
    position_cases(out)
    versions = {"transformers": transformers.__version__, "torch": torch.__version__,
                "safetensors": safetensors.__version__}
    metadata = {"format": "pt", "generated_by": json.dumps(versions),
                "config": json.dumps(CONFIG, sort_keys=True), "dropout": json.dumps(DROPOUT, sort_keys=True)}
    os.makedirs(OUT, exist_ok=True)
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(OUT, "reference.safetensors"), metadata)
    print(f"wrote {len(out)} tensors to {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
