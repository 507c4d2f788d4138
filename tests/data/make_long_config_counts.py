"""tests/data/long_config_counts.json: what transformers counts for the PEGASUS-X and LongT5 configs under configs/
(the long-document families): tests/integration/long_families_cli_test.cpp compares `fitsum info` with the counts,
tests/model/floating_point_ops_test.cpp the count without embeddings (total_flos) with fitsum's.

    python3 tests/data/make_long_config_counts.py   # transformers 4.47.1, torch 1.13
"""
import json
import os

import torch
import transformers
from transformers import AutoConfig, AutoModelForSeq2SeqLM
from transformers.modeling_utils import no_init_weights

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(os.path.dirname(HERE))
NAMES = ["pegasus-x-base", "pegasus-x-large", "long-t5-local-base", "long-t5-tglobal-base"]


def main():
    out = {"versions": {"transformers": transformers.__version__, "torch": torch.__version__}, "models": {}}
    for name in NAMES:
        config = AutoConfig.from_pretrained(os.path.join(PROJECT, "configs", name))
        with no_init_weights(_enable=True):
            model = AutoModelForSeq2SeqLM.from_config(config)
        model.tie_weights()  # skipped under no_init_weights; from_pretrained ties them
        out["models"][name] = {"class": type(model).__name__, "num_parameters": model.num_parameters(),
                               "num_parameters_exclude_embeddings": model.num_parameters(exclude_embeddings=True),
                               "buffers": {n: list(b.shape) for n, b in model.named_buffers()}}
        print(name, out["models"][name]["num_parameters"], flush=True)
        del model
    with open(os.path.join(HERE, "long_config_counts.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
