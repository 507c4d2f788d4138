"""The folder `fitsum train` saves for PEGASUS-X and LongT5 (local and transient-global attention) is one transformers
loads: from_pretrained finds every weight (none missing, none unexpected, the family's class), its logits and loss on
a padded batch equal fitsum's on the same folder, and AutoTokenizer reads the family's tokenizer from it, giving the
ids `fitsum tokenize` gives. Trained from a transformers-made folder and from fitsum's own random init."""
import json
import os
import shutil

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from harness import (FAMILIES, SOURCE, assert_close, fitsum, load_file, probe, save_batch, save_model, shared_path,
                     write_jsonl)

LONG_FAMILIES = ["pegasus_x", "longt5_local", "longt5_tglobal"]


def records(count, vocab, seed, eos):
    """Pre-tokenized records of 5 to 22 source and 3 to 8 label tokens: batches are padded, and the sources end
    inside a block."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        s, t = int(torch.randint(5, 23, (1,), generator=g)), int(torch.randint(3, 9, (1,), generator=g))
        out.append({"id": str(i), "input_ids": torch.randint(3, vocab, (s - 1,), generator=g).tolist() + [eos],
                    "labels": torch.randint(3, vocab, (t - 1,), generator=g).tolist() + [eos]})
    return out


def padded_batch(rows, pad):
    source = max(len(r["input_ids"]) for r in rows)
    target = max(len(r["labels"]) for r in rows)
    ids = torch.full((len(rows), source), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full((len(rows), target), -100, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r["input_ids"])] = torch.tensor(r["input_ids"])
        mask[i, :len(r["input_ids"])] = 1
        labels[i, :len(r["labels"])] = torch.tensor(r["labels"])
    return ids, mask, labels


@pytest.mark.parametrize("family", LONG_FAMILIES)
@pytest.mark.parametrize("start", ["transformers", "fitsum_init"])
def test_saved_folder_loads_in_transformers_with_fitsums_logits(tmp_path, family, start):
    f = FAMILIES[family]
    if start == "transformers":
        model = f.random_model(seed=13, shape="tiny")
        source = ["--model_name_or_path", save_model(model, tmp_path / "start")]
        vocab = model.config.vocab_size
    else:
        config = f.config("tiny")
        config.save_pretrained(tmp_path / "config")
        source = ["--config_name", str(tmp_path / "config" / "config.json")]
        vocab = config.vocab_size
    data = records(8, vocab, seed=2, eos=f.eos())
    out = tmp_path / "out"
    fitsum("train", *source, "--train_file", write_jsonl(tmp_path / "train.jsonl", data), "--output_dir", out,
           "--per_device_train_batch_size", "4", "--max_steps", "2", "--learning_rate", "1e-2",
           "--save_strategy", "no", "--max_source_length", "64", "--max_target_length", "16")

    loaded, info = AutoModelForSeq2SeqLM.from_pretrained(out, output_loading_info=True)
    assert type(loaded) is f.model_class
    assert {k: v for k, v in info.items() if v} == {}, f"transformers' loading info: {info}"
    if start == "transformers":
        moved = [n for n, p in loaded.state_dict().items() if not torch.equal(p, model.state_dict()[n])]
        assert moved, "the saved weights are the starting ones: nothing was trained"

    ids, mask, labels = padded_batch(data[:3], f.pad())
    loaded.eval()
    with torch.no_grad():
        want = loaded(input_ids=ids, attention_mask=mask, labels=labels)
    probe("forward", "--model", out, "--batch", save_batch(tmp_path / "batch.safetensors", input_ids=ids,
          attention_mask=mask, labels=labels), "--out", tmp_path / "fitsum.safetensors")
    got = load_file(str(tmp_path / "fitsum.safetensors"))
    assert_close(got["loss"][0], want.loss, 1e-5, "loss")
    assert_close(got["logits"], want.logits, 1e-4, "logits")


def tokenizer_folder(family, tmp_path):
    """The family's tokenizer as a Hub folder holds it, and its vocabulary size. PEGASUS-X: PEGASUS's SentencePiece
    with tokenizer.json (transformers 5 maps model_type pegasus_x to the tokenizers backend, which reads
    tokenizer.json only; fitsum copies it into the saved folder). LongT5: T5's SentencePiece with the
    tokenizer_config.json naming T5Tokenizer (transformers 5 maps no tokenizer to model_type longt5)."""
    if family == "pegasus_x":
        return shared_path("data", "pegasus"), 96103
    folder = tmp_path / "t5-tokenizer"
    folder.mkdir()
    shutil.copy(os.path.join(SOURCE, "tests", "data", "fixtures", "tiny-t5", "spiece.model"), folder)
    with open(folder / "tokenizer_config.json", "w") as f:
        json.dump({"tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
                   "extra_ids": 0}, f)
    return str(folder), 512


@pytest.mark.parametrize("family", LONG_FAMILIES)
def test_saved_tokenizer_is_the_familys(tmp_path, family):
    f = FAMILIES[family]
    tokenizer, vocab = tokenizer_folder(family, tmp_path)
    config = f.config("tiny", vocab_size=vocab)
    config.save_pretrained(tmp_path / "config")
    with open(os.path.join(SOURCE, "data", "samsum", "validation.jsonl")) as lines:
        dialogues = [json.loads(next(lines)) for _ in range(4)]
    data = write_jsonl(tmp_path / "dialogues.jsonl", dialogues)
    out = tmp_path / "out"
    fitsum("train", "--config_name", tmp_path / "config" / "config.json", "--tokenizer_name",
           tokenizer, "--train_file", data, "--output_dir", out, "--max_steps", "1",
           "--save_strategy", "no", "--max_source_length", "48", "--max_target_length", "16")
    fitsum("tokenize", "--model", out, "--input_file", data, "--output_file", tmp_path / "ids.jsonl",
           "--max_source_length", "48", "--max_target_length", "16")
    with open(tmp_path / "ids.jsonl") as lines:
        ours = [json.loads(line) for line in lines]

    hf = AutoTokenizer.from_pretrained(out)
    # transformers 5 reads PEGASUS-X's through its tokenizers backend class, from the copied tokenizer.json.
    expected = ("PegasusTokenizer", "TokenizersBackend") if family == "pegasus_x" else ("T5Tokenizer",)
    assert type(hf).__name__.startswith(expected), type(hf).__name__
    for record, mine in zip(dialogues, ours):
        assert mine["input_ids"] == hf(record["dialogue"], max_length=48, truncation=True).input_ids
        assert mine["labels"] == hf(text_target=record["summary"], max_length=16, truncation=True).input_ids
