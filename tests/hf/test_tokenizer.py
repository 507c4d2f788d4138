"""Tokenization: `fitsum tokenize` gives the ids of transformers' PegasusTokenizer (slow, sentencepiece) and
PegasusTokenizerFast (tokenizers) for every SAMSum record of all three splits, truncated as run_summarization.py
truncates (max_length, truncation=True: </s> kept last)."""
import pytest
from transformers import PegasusTokenizer, PegasusTokenizerFast

from harness import fitsum, read_jsonl, shared_path

MAX_SOURCE, MAX_TARGET = 256, 48  # short enough that many dialogues and some summaries are truncated


@pytest.fixture(scope="module")
def tokenizers():
    folder = shared_path("data", "pegasus")
    return folder, PegasusTokenizer.from_pretrained(folder), PegasusTokenizerFast.from_pretrained(folder)


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_samsum_ids_equal_slow_and_fast_tokenizers(tmp_path, tokenizers, split):
    folder, slow, fast = tokenizers
    data = shared_path("data", "samsum", f"{split}.jsonl")
    out = tmp_path / "tok.jsonl"
    fitsum("tokenize", "--model", folder, "--input_file", data, "--output_file", out,
           "--max_source_length", MAX_SOURCE, "--max_target_length", MAX_TARGET)
    got = read_jsonl(out)
    records = read_jsonl(data)
    assert len(got) == len(records)
    texts = [r["dialogue"] for r in records]
    summaries = [r["summary"] for r in records]
    truncated = 0
    for name, tok in (("slow", slow), ("fast", fast)):
        inputs = tok(texts, max_length=MAX_SOURCE, truncation=True)["input_ids"]
        labels = tok(text_target=summaries, max_length=MAX_TARGET, truncation=True)["input_ids"]
        bad = [i for i, (g, x, y) in enumerate(zip(got, inputs, labels))
               if g["input_ids"] != x or g["labels"] != y]
        assert not bad, (f"{split}: {len(bad)} of {len(records)} records differ from the {name} tokenizer, first "
                         f"id {records[bad[0]]['id']}:\n fitsum {got[bad[0]]}\n hf     {inputs[bad[0]]} {labels[bad[0]]}")
        truncated = sum(len(x) == MAX_SOURCE for x in inputs)
    assert truncated > 0, "no dialogue reached max_source_length: truncation is not exercised"
