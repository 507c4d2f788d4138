"""tests/data/long_config_counts.json: what transformers counts for the PEGASUS-X and LongT5 configs under configs/
(the long-document families): tests/integration/long_families_cli_test.cpp compares `fitsum info` with the counts,
tests/model/floating_point_ops_test.cpp the count without embeddings (total_flos) with fitsum's.

    python3 tests/data/make_long_config_counts.py   # transformers 4.47.1, torch 1.13
"""
import json
import os

import torch
import transformers

from make_family_fixtures import HERE, param_counts

NAMES = ["pegasus-x-base", "pegasus-x-large", "long-t5-local-base", "long-t5-tglobal-base"]


def main():
    out = {"versions": {"transformers": transformers.__version__, "torch": torch.__version__},
           "models": param_counts(NAMES)}
    with open(os.path.join(HERE, "long_config_counts.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
