#!/usr/bin/python3
"""Expected outputs of Hugging Face generate() for decoding settings the fixtures' case.json does not cover:
no_repeat_ngram_size, early_stopping=True and "never", min_length in greedy search, max_length reached by open
beams. Writes tests/data/generation_cases.json.

The model is the plain reference of ../shared/reference/pegasus_ref.py. Its `greedy` and `beam_search` implement
generate() for the fixtures' settings only; `hf_greedy` and `hf_beam_search` below extend them with the published
behaviour of transformers 4.x before 4.36 (generation/utils.py greedy_search / beam_search,
generation/beam_search.py BeamSearchScorer + BeamHypotheses, generation/logits_process.py
NoRepeatNGramLogitsProcessor, MinLengthLogitsProcessor, ForcedEOSTokenLogitsProcessor, in that order). Before
writing anything the script checks that the extension reproduces case.json's greedy, beam and beam_min_length
outputs of both fixtures exactly, so both implementations agree where they overlap.

    /usr/bin/python3 tests/data/make_generation_cases.py        (from the project root; ../shared beside it)
Deterministic: the same file byte for byte on every run.
"""
import json
import math
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
project = os.path.normpath(os.path.join(here, "..", ".."))
shared = os.path.normpath(os.path.join(project, "..", "shared"))
sys.path.insert(0, os.path.join(shared, "reference"))
import pegasus_ref as R  # noqa: E402

FIXTURES = {
    "tiny-pegasus": os.path.join(shared, "fixtures", "tiny-pegasus"),
    "odd-pegasus": os.path.join(project, "tests", "data", "fixtures", "odd-pegasus"),
}


def load(name):
    d = FIXTURES[name]
    c = json.load(open(os.path.join(d, "config.json")))
    w = R.load_safetensors(os.path.join(d, "model.safetensors"))
    return c, R.Ref(c, w), json.load(open(os.path.join(d, "case.json")))


# ---- logits processors (HF LogitsProcessorList order for these three) ----

def banned_ngram_tokens(row, n):
    """NoRepeatNGramLogitsProcessor for one hypothesis: every token that would complete an n-gram already present
    in `row` (the decoder start token included)."""
    cur_len = len(row)
    if cur_len + 1 < n:
        return []
    seen = {}
    for i in range(cur_len - n + 1):
        seen.setdefault(tuple(row[i:i + n - 1]), []).append(row[i + n - 1])
    return seen.get(tuple(row[cur_len + 1 - n:cur_len]), [])


def process(seqs, scores, o):
    cur_len = seqs.shape[1]
    if o["no_repeat_ngram_size"] > 0:
        for r in range(seqs.shape[0]):
            for t in banned_ngram_tokens(seqs[r].tolist(), o["no_repeat_ngram_size"]):
                scores[r, t] = -float("inf")
    if cur_len < o["min_length"]:
        scores[:, o["eos"]] = -float("inf")
    if o["forced_eos_token_id"] is not None and cur_len == o["max_length"] - 1:
        scores[:, :] = -float("inf")
        scores[:, o["forced_eos_token_id"]] = 0.0
    return scores


# ---- strategies ----

def hf_greedy(ref, ids, am, o):
    enc = ref.encode(ids, am)
    seqs = torch.full((ids.shape[0], 1), o["start"], dtype=torch.long)
    unfinished = torch.ones(ids.shape[0], dtype=torch.long)
    while True:
        logits = ref.decode(seqs, enc, am)[:, -1]
        nxt = process(seqs, logits, o).argmax(-1)
        nxt = nxt * unfinished + o["pad"] * (1 - unfinished)
        seqs = torch.cat([seqs, nxt[:, None]], 1)
        unfinished = unfinished * (nxt != o["eos"]).long()
        if unfinished.max() == 0 or seqs.shape[1] >= o["max_length"]:
            return seqs


class BeamHypotheses:
    def __init__(self, num_beams, length_penalty, early_stopping, max_length):
        self.num_beams, self.lp, self.early, self.max_length = num_beams, length_penalty, early_stopping, max_length
        self.beams = []
        self.worst = 1e9

    def add(self, hyp, sum_logprobs):
        score = sum_logprobs / (len(hyp) ** self.lp)
        if len(self.beams) < self.num_beams or score > self.worst:
            self.beams.append((score, hyp))
            if len(self.beams) > self.num_beams:
                order = sorted((s, i) for i, (s, _) in enumerate(self.beams))
                del self.beams[order[0][1]]
                self.worst = order[1][0]
            else:
                self.worst = min(score, self.worst)

    def is_done(self, best_sum_logprobs, cur_len):
        if len(self.beams) < self.num_beams:
            return False
        if self.early is True:
            return True
        if self.early is False:
            return self.worst >= best_sum_logprobs / cur_len ** self.lp
        # "never": the best score still attainable
        if self.lp > 0.0:
            return self.worst >= best_sum_logprobs / self.max_length ** self.lp
        return self.worst >= best_sum_logprobs / cur_len ** self.lp


def hf_beam_search(ref, ids, am, o):
    B, nb, eos, pad = ids.shape[0], o["num_beams"], o["eos"], o["pad"]
    enc = ref.encode(ids, am).repeat_interleave(nb, 0)
    am_b = am.repeat_interleave(nb, 0)
    seqs = torch.full((B * nb, 1), o["start"], dtype=torch.long)
    beam_scores = torch.zeros(B, nb)
    beam_scores[:, 1:] = -1e9
    beam_scores = beam_scores.view(-1)
    hyps = [BeamHypotheses(nb, o["length_penalty"], o["early_stopping"], o["max_length"]) for _ in range(B)]
    done = [False] * B
    while True:
        cur_len = seqs.shape[1]
        lp = torch.log_softmax(ref.decode(seqs, enc, am_b)[:, -1], dim=-1)
        lp = process(seqs, lp, o)
        V = lp.shape[-1]
        scores = (lp + beam_scores[:, None]).view(B, nb * V)
        top_s, top_t = torch.topk(scores, 2 * nb, dim=1, largest=True, sorted=True)
        nxt_idx, nxt_tok = top_t // V, top_t % V
        new_scores = torch.zeros(B, nb)
        new_tokens = torch.full((B, nb), pad, dtype=torch.long)
        new_src = torch.zeros(B, nb, dtype=torch.long)
        for b in range(B):
            if done[b]:
                continue
            k = 0
            for rank in range(2 * nb):
                t, s, row = int(nxt_tok[b, rank]), float(top_s[b, rank]), b * nb + int(nxt_idx[b, rank])
                if t == eos:
                    if rank >= nb:
                        continue
                    hyps[b].add(seqs[row].tolist(), s)
                else:
                    new_scores[b, k], new_tokens[b, k], new_src[b, k] = s, t, row
                    k += 1
                if k == nb:
                    break
            done[b] = done[b] or hyps[b].is_done(float(top_s[b].max()), cur_len)
        beam_scores = new_scores.view(-1)
        seqs = torch.cat([seqs[new_src.view(-1)], new_tokens.view(-1, 1)], dim=1)
        if all(done) or seqs.shape[1] >= o["max_length"]:
            break
    for b in range(B):
        if not done[b]:
            for i in range(nb):
                hyps[b].add(seqs[b * nb + i].tolist(), float(beam_scores[b * nb + i]))
    best = []
    for h in hyps:
        # sorted() is stable and pop() takes the last: among equal scores the latest added wins
        best.append(sorted(h.beams, key=lambda x: x[0])[-1])
    L = min(max(len(t) for _, t in best) + 1, o["max_length"])
    out = torch.full((B, L), pad, dtype=torch.long)
    for b, (_, t) in enumerate(best):
        out[b, :len(t)] = torch.tensor(t)
        if len(t) < L:
            out[b, len(t)] = eos
    return out, [s for s, _ in best]


def options(c, **kw):
    o = {"start": c["decoder_start_token_id"], "eos": c["eos_token_id"], "pad": c["pad_token_id"],
         "num_beams": 1, "max_length": 20, "min_length": 0, "length_penalty": 1.0, "early_stopping": False,
         "no_repeat_ngram_size": 0, "forced_eos_token_id": c.get("forced_eos_token_id")}
    o.update(kw)
    return o


def run(ref, c, src, am, **kw):
    o = options(c, **kw)
    with torch.no_grad():
        if o["num_beams"] == 1:
            return hf_greedy(ref, src, am, o), None
        return hf_beam_search(ref, src, am, o)


def self_check():
    """The extension must reproduce the reference's own outputs in case.json."""
    for name in FIXTURES:
        c, ref, case = load(name)
        g = case["greedy"]
        src, am = torch.tensor(g["input_ids"]), torch.tensor(g["attention_mask"])
        seqs, _ = run(ref, c, src, am, max_length=g["max_length"])
        assert seqs.tolist() == g["sequences"], (name, "greedy", seqs.tolist())
        for key in ("beam", "beam_min_length"):
            e = case[key]
            seqs, scores = run(ref, c, src, am, num_beams=e["num_beams"], max_length=e["max_length"],
                               length_penalty=e["length_penalty"], min_length=e["min_length"])
            assert seqs.tolist() == e["sequences"], (name, key, seqs.tolist())
            assert all(abs(a - b) < 1e-6 for a, b in zip(scores, e["sequence_scores"])), (name, key, scores)
    print("self-check: case.json greedy, beam and beam_min_length reproduced for", ", ".join(FIXTURES))


def batch(rows):
    """Token rows (each ending in eos 1) padded with 0 into input_ids and attention_mask."""
    T = max(len(r) for r in rows)
    src = torch.zeros(len(rows), T, dtype=torch.long)
    for i, r in enumerate(rows):
        src[i, :len(r)] = torch.tensor(r)
    return src, (src != 0).long()


def main():
    self_check()
    cases = []

    def add(name, fixture, rows, why, must_differ_from=None, **kw):
        c, ref, _ = load(fixture)
        src, am = batch(rows)
        seqs, scores = run(ref, c, src, am, **kw)
        if must_differ_from is not None:
            base, _ = run(ref, c, src, am, **{**kw, **must_differ_from})
            assert base.tolist() != seqs.tolist(), f"{name}: the setting under test changes nothing"
        settings = {k: v for k, v in options(c, **kw).items() if k not in ("start", "eos", "pad")}
        case = {"name": name, "fixture": fixture, "why": why, "options": settings,
                "input_ids": src.tolist(), "attention_mask": am.tolist(), "sequences": seqs.tolist()}
        if scores is not None:
            case["sequence_scores"] = scores
        cases.append(case)
        print(name, seqs.tolist(), scores if scores is not None else "")

    # Sources that repeat themselves: the copy-trained models want to repeat n-grams, the ban must stop them.
    repeats = [[120, 130, 140, 120, 130, 140, 120, 130, 1],
               [150, 151, 150, 151, 150, 151, 1],
               [110, 111, 112, 113, 110, 111, 112, 113, 1],
               [160, 161, 162, 160, 161, 163, 1]]
    fixture_case = json.load(open(os.path.join(FIXTURES["tiny-pegasus"], "case.json")))
    copy_sources = [[t for t in row if t != 0] for row in fixture_case["greedy"]["input_ids"]]

    add("greedy_no_repeat_2", "tiny-pegasus", repeats, "NoRepeatNGramLogitsProcessor in greedy search",
        must_differ_from={"no_repeat_ngram_size": 0}, max_length=16, no_repeat_ngram_size=2)
    add("greedy_no_repeat_3", "tiny-pegasus", repeats, "a longer n-gram: bans start later",
        must_differ_from={"no_repeat_ngram_size": 0}, max_length=16, no_repeat_ngram_size=3)
    add("beam_no_repeat_2", "tiny-pegasus", repeats, "NoRepeatNGramLogitsProcessor on beams that get reordered",
        must_differ_from={"no_repeat_ngram_size": 0}, num_beams=4, max_length=16, length_penalty=1.0,
        no_repeat_ngram_size=2)
    add("beam_no_repeat_3_odd", "odd-pegasus", repeats, "the same on the other fixture, 3-grams",
        must_differ_from={"no_repeat_ngram_size": 0}, num_beams=3, max_length=14, length_penalty=0.8,
        no_repeat_ngram_size=3)
    add("greedy_min_length", "tiny-pegasus", copy_sources, "MinLengthLogitsProcessor in greedy search",
        must_differ_from={"min_length": 0}, max_length=16, min_length=11)

    # early_stopping: a length penalty that rewards length plus a minimum length make the first finished
    # hypotheses poor; stopping as soon as num_beams are finished (True), the default heuristic (False) and the
    # exact bound ("never") then part ways. (The copy-trained tiny-pegasus is too sure of itself to show it.)
    es = dict(num_beams=3, max_length=16, length_penalty=2.0, min_length=9, no_repeat_ngram_size=2)
    add("beam_early_stopping_true", "odd-pegasus", repeats,
        "BeamHypotheses.is_done with early_stopping=True: done as soon as num_beams hypotheses are finished",
        must_differ_from={"early_stopping": False}, early_stopping=True, **es)
    add("beam_early_stopping_false", "odd-pegasus", repeats, "the same settings with the default heuristic",
        early_stopping=False, **es)
    add("beam_early_stopping_never", "odd-pegasus", repeats,
        "early_stopping=\"never\": with length_penalty > 0 the bound divides by max_length",
        must_differ_from={"early_stopping": False}, early_stopping="never", **es)
    add("beam_early_stopping_never_no_min", "odd-pegasus", repeats, "\"never\" without a minimum length",
        must_differ_from={"early_stopping": False}, num_beams=2, max_length=16, length_penalty=2.0,
        early_stopping="never", no_repeat_ngram_size=2)
    add("beam_open_at_max_length", "odd-pegasus", repeats,
        "no forced eos: hypotheses still open at max_length are finalized with their running scores",
        must_differ_from={"forced_eos_token_id": 1}, num_beams=2, max_length=8, length_penalty=1.0,
        forced_eos_token_id=None)
    add("greedy_no_forced_eos", "tiny-pegasus", repeats, "no forced eos: greedy rows may end without eos",
        must_differ_from={"forced_eos_token_id": 1}, max_length=6, forced_eos_token_id=None)
    add("beam_negative_length_penalty", "tiny-pegasus", repeats, "length_penalty < 0 favours short hypotheses",
        num_beams=4, max_length=16, length_penalty=-1.0, min_length=5)

    out = {"about": "Expected HF generate() outputs (transformers < 4.36 semantics) for tests/model/generate_test.cpp; "
                    "made by tests/data/make_generation_cases.py. Fixtures: tiny-pegasus is ../shared/fixtures/"
                    "tiny-pegasus, odd-pegasus is tests/data/fixtures/odd-pegasus. Token ids: start 0, eos 1, pad 0; "
                    "forced_eos_token_id 1 (both configs).",
           "cases": cases}
    path = os.path.join(here, "generation_cases.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
