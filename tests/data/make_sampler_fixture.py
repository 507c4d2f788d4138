"""Writes tests/data/hf_data_order.json: the training order of transformers' Trainer + accelerate, computed with their
own code, for the default suite's Sampler tests (tests/unit/sampler_test.cpp), which read it offline:

- randperm: torch.randperm(count, generator=torch.Generator().manual_seed(seed)), what accelerate's
  SeedableRandomSampler yields in epoch e for seed s with seed = s + e;
- group_by_length: transformers' LengthGroupedSampler (no generator: torch's global generator) in epochs 0, 1 and 2
  of a run seeded with set_seed(seed), each epoch's DataLoader iterator drawing its base seed first, as
  torch.utils.data does, and nothing else drawing from the generator;
- shards: accelerate's BatchSamplerShard (split_batches=False, even_batches=True) over a BatchSampler of
  range(count), for each process.

Run it with the venv of `make test-hf` (either torch line gives the same file):

    build/hf-venv/bin/python tests/data/make_sampler_fixture.py
"""
import json
import os

import accelerate
import torch
import transformers
from accelerate.data_loader import BatchSamplerShard
from torch.utils.data import BatchSampler, DataLoader
from transformers.trainer_pt_utils import LengthGroupedSampler

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_data_order.json")
# Lengths with ties (the stable sort) and two maxima (torch.argmax takes the first mega-batch holding one).
LENGTHS = [5, 17, 3, 9, 9, 12, 1, 30, 7, 7, 22, 4, 9, 16, 2, 8, 30, 11, 6, 10, 3, 14, 9, 25, 6, 1, 18]


def randperm_cases():
    cases = []
    for count in (1, 2, 10, 16, 100):
        for seed in (0, 1, 42, 43, 1234567, 2**40 + 3):
            g = torch.Generator()
            g.manual_seed(seed)
            cases.append({"count": count, "seed": seed, "order": torch.randperm(count, generator=g).tolist()})
    return cases


def group_by_length_cases():
    cases = []
    for seed in (42, 7):
        for batch_size in (2, 3):
            sampler = LengthGroupedSampler(batch_size, lengths=LENGTHS)
            loader = DataLoader(list(range(len(LENGTHS))), sampler=sampler, batch_size=1)
            torch.manual_seed(seed)
            for epoch in range(3):
                order = [int(b) for b in loader]  # iter(): the base-seed draw, then the sampler's permutation
                cases.append({"seed": seed, "batch_size": batch_size, "epoch": epoch, "order": order})
    return cases


def shard_cases():
    cases = []
    for count, batch_size, processes, drop_last in [(10, 2, 2, False), (9, 2, 2, False), (11, 2, 3, False),
                                                    (3, 2, 2, False), (5, 4, 3, False), (10, 3, 2, True),
                                                    (9, 2, 3, True), (16, 4, 2, False)]:
        batches = BatchSampler(range(count), batch_size, drop_last)
        shards = [list(BatchSamplerShard(batches, num_processes=processes, process_index=p, split_batches=False,
                                         even_batches=True)) for p in range(processes)]
        cases.append({"count": count, "batch_size": batch_size, "processes": processes, "drop_last": drop_last,
                      "batches": shards})
    return cases


def main():
    data = {
        "generated_by": f"torch {torch.__version__}, transformers {transformers.__version__}, "
                        f"accelerate {accelerate.__version__} (tests/data/make_sampler_fixture.py)",
        "lengths": LENGTHS,
        "randperm": randperm_cases(),
        "group_by_length": group_by_length_cases(),
        "shards": shard_cases(),
    }
    with open(OUT, "w") as f:
        json.dump(data, f)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
