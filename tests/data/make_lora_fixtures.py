"""Writes the PEFT-made LoRA adapters of tests/data/fixtures/lora-bart* (run from the project's root):

  python tests/data/make_lora_fixtures.py

with PEFT, transformers and torch installed. Each adapter is on tests/data/fixtures/tiny-bart, made by
get_peft_model + save_pretrained exactly as a PEFT user makes one, with lora_B drawn at random (PEFT starts it at
zero, which would make the adapter compute nothing) and trainable biases moved off the base's, so that a reader that
drops or misplaces any tensor computes other logits. expected.json holds the base model's and the adapted model's
logits for one input, and PEFT's and transformers' versions.
"""
import json
import os

import peft
import torch
import transformers
from peft import LoraConfig, TaskType, get_peft_model
from transformers import AutoModelForSeq2SeqLM

BASE = "tests/data/fixtures/tiny-bart"
INPUT_IDS = [[0, 438, 589, 512, 494, 161, 552, 398, 294, 591, 2]]
DECODER_IDS = [[2, 0, 438, 589, 512]]


def logits(model):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(INPUT_IDS), decoder_input_ids=torch.tensor(DECODER_IDS))
    return out.logits[0].tolist()


def make(name, seed, safe, **config):
    torch.manual_seed(seed)
    base = AutoModelForSeq2SeqLM.from_pretrained(BASE)
    base_logits = logits(base)
    model = get_peft_model(base, LoraConfig(task_type=TaskType.SEQ_2_SEQ_LM, **config))
    with torch.no_grad():
        for key, p in model.named_parameters():
            if "lora_B" in key:
                p.normal_(0.0, 0.2)
            elif p.requires_grad and "lora_" not in key:
                p.add_(torch.randn_like(p) * 0.1)
    model.eval()
    out = f"tests/data/fixtures/{name}"
    model.save_pretrained(out, safe_serialization=safe)
    os.remove(os.path.join(out, "README.md"))  # PEFT's empty model card template
    expected = {
        "about": "Logits of tiny-bart without and with this adapter (PEFT), float32 CPU; made by "
        "tests/data/make_lora_fixtures.py",
        "versions": {"peft": peft.__version__, "transformers": transformers.__version__, "torch": torch.__version__},
        "input_ids": INPUT_IDS,
        "decoder_input_ids": DECODER_IDS,
        "base_logits": base_logits,
        "adapter_logits": logits(model),
    }
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f)


make("lora-bart", 1, True, r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "fc1"], bias="lora_only")
make("lora-bart-bin", 2, False, r=2, lora_alpha=8, target_modules="all-linear", bias="all", use_rslora=True,
     lora_dropout=0.1)
