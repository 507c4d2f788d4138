"""Evaluation: `fitsum eval` reports what Seq2SeqTrainer.evaluate(predict_with_generate=True) with
run_summarization.py's compute_metrics reports on the same checkpoint and SAMSum records: eval_loss, the generated
ids, ROUGE-1/2/L/Lsum x 100 and eval_gen_len.

Two documented differences in the ROUGE aggregate: evaluate's "rouge" metric returns the mid of rouge_score's
BootstrapAggregator, fitsum eval the exact mean (fitsum rouge --aggregate bootstrap gives the mid); and
run_summarization.py rounds to 4 decimals. So compute_metrics here takes rouge_score's per-record scores and their
exact mean, unrounded. Sentence splitting for rougeLsum (nltk.sent_tokenize) needs Punkt's data, which PyPI does
not ship: without it both sides score without splitting."""
import json
import os
import shutil
from collections import Counter

import numpy as np
import pytest
import torch
import transformers
from packaging.version import Version
from rouge_score import rouge_scorer
from transformers import (BartForConditionalGeneration, BartTokenizer, PegasusForConditionalGeneration,
                          PegasusTokenizer, Seq2SeqTrainer, Seq2SeqTrainingArguments, T5ForConditionalGeneration,
                          T5Tokenizer)

from families import FAMILIES
from harness import SOURCE, assert_close, fitsum, read_json, read_jsonl, shared_path, write_jsonl

COUNT, BATCH, BEAMS, MAX_LENGTH, MAX_SOURCE, MAX_TARGET = 10, 4, 4, 40, 128, 48


class Tokenized(torch.utils.data.Dataset):
    def __init__(self, tokenizer, records, max_source=MAX_SOURCE, prefix=""):
        self.inputs = tokenizer([prefix + r["dialogue"] for r in records], max_length=max_source, truncation=True)
        self.labels = tokenizer(text_target=[r["summary"] for r in records], max_length=MAX_TARGET,
                                truncation=True)["input_ids"]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.inputs["input_ids"][i], "attention_mask": self.inputs["attention_mask"][i],
                "labels": self.labels[i]}


# The tiny checkpoints evaluated: (folder, model class, tokenizer class, the tokens' word-start mark).
CHECKPOINTS = {
    "pegasus": (lambda: shared_path("data", "pegasus-tiny"), PegasusForConditionalGeneration, PegasusTokenizer,
                "\u2581"),
    "bart": (lambda: os.path.join(SOURCE, "tests", "data", "fixtures", "tiny-bart"), BartForConditionalGeneration,
             BartTokenizer, "\u0120"),
    "t5": (lambda: os.path.join(SOURCE, "tests", "data", "fixtures", "tiny-t5"), T5ForConditionalGeneration,
           T5Tokenizer, "\u2581"),
}
# The long-input families start from a random model of the families' tiny shape (tests/hf/families.py) with the
# vocabulary of the tokenizer they use (PEGASUS-X PEGASUS's, LongT5 T5's), saved with save_pretrained.
LONG_INPUT = {
    "pegasus_x": (FAMILIES["pegasus_x"], lambda: shared_path("data", "pegasus-tiny"), PegasusTokenizer),
    "longt5": (FAMILIES["longt5_tglobal"], CHECKPOINTS["t5"][0], T5Tokenizer),
}
# run_summarization.py's source_prefix for each family (T5 and LongT5 summarize from T5's task prefix).
PREFIX = {"pegasus": "", "bart": "", "t5": "summarize: ", "pegasus_x": "", "longt5": "summarize: "}


def random_long_input_model(family, folder):
    """A random model of a long-input family saved into `folder` as transformers saves it, beside its tokenizer's
    files as the tokenizer's folder has them (transformers 5 saves no spiece.model for T5's tokenizer)."""
    family_class, tokenizer_source, tokenizer_class = LONG_INPUT[family]
    tokenizer = tokenizer_class.from_pretrained(tokenizer_source())
    model = family_class.random_model(seed=5, shape="tiny", vocab_size=len(tokenizer))
    model.save_pretrained(folder, safe_serialization=True)
    for name in ("spiece.model", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
        if os.path.exists(os.path.join(tokenizer_source(), name)):
            shutil.copy(os.path.join(tokenizer_source(), name), folder)
    return folder


def trained_on(records, family, source, folder, tmp_path, tokenizer_class):
    """Models without a final_logits_bias to raise (T5, PEGASUS-X, LongT5) are fine-tuned by fitsum on these records
    instead (60 epochs of Adafactor), so that their predictions share words with the references. transformers loads
    fitsum's saved folder."""
    fitsum("train", "--model_name_or_path", source, "--train_file",
           write_jsonl(tmp_path / "train.jsonl", records), "--output_dir", folder, "--source_prefix", PREFIX[family],
           "--max_source_length", MAX_SOURCE, "--max_target_length", MAX_TARGET, "--per_device_train_batch_size", 5,
           "--num_train_epochs", 60, "--optim", "adafactor", "--learning_rate", 1e-2, "--save_strategy", "no",
           "--disable_tqdm")
    return tokenizer_class.from_pretrained(folder)


def eos_padding_as_pad(preds, tokenizer):
    """transformers >= 4.50 pads a finished beam with `pad_token_id or eos_token_id`, which is eos when pad is 0 (T5,
    PEGASUS); fitsum, like transformers < 4.50, pads with pad (docs/hf.md). The ids after each row's first eos are
    checked to be eos (or the Trainer's padding between batches) and given back as pad, so that the ids and run_summarization.py's gen_len compare."""
    if Version(transformers.__version__) < Version("4.50") or tokenizer.pad_token_id != 0:
        return preds
    preds = preds.copy()
    for row in preds:
        ends = np.flatnonzero(row[1:] == tokenizer.eos_token_id)
        if len(ends):
            first = int(ends[0]) + 1
            tail = row[first + 1:]  # eos within a generate() batch, pad where the Trainer joined batches of other widths
            assert ((tail == tokenizer.eos_token_id) | (tail == tokenizer.pad_token_id)).all(), \
                "HF pads a finished beam with other than eos"
            row[first + 1:] = tokenizer.pad_token_id
    return preds


def summary_word_model(records, folder, family, tmp_path):
    """A tiny checkpoint (its own outputs score ROUGE 0) with final_logits_bias raised on the tokens that occur most in
    these records' summaries, so that its predictions share words with the references and every ROUGE score is a
    non-zero number to compare. Saved with save_pretrained, tokenizer included."""
    if family in LONG_INPUT:
        family_class, _, tokenizer_class = LONG_INPUT[family]
        model_class = family_class.model_class
        source = random_long_input_model(family, str(tmp_path / "random"))
        tokenizer = trained_on(records, family, source, folder, tmp_path, tokenizer_class)
    elif family == "t5":
        model_class, tokenizer_class = CHECKPOINTS["t5"][1], CHECKPOINTS["t5"][2]
        tokenizer = trained_on(records, family, CHECKPOINTS["t5"][0](), folder, tmp_path, tokenizer_class)
    else:
        source, model_class, tokenizer_class, word_start = CHECKPOINTS[family]
        source = source()
        tokenizer = tokenizer_class.from_pretrained(source)
        model = model_class.from_pretrained(source)
        words = [t for r in records for t in tokenizer(r["summary"])["input_ids"]
                 if tokenizer.convert_ids_to_tokens(t).lstrip(word_start).isalpha()]
        with torch.no_grad():
            for rank, (token, _) in enumerate(Counter(words).most_common(60)):
                model.final_logits_bias[0, token] += 8.0 - rank * 0.05
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
    # Each token once per summary (NoRepeatNGram): with min_length 32 the predictions hold many different summary
    # words. Set in generation_config.json as a user edits it (no "_from_model_config"), and the model reloaded from
    # the folder, so that both sides read the same files.
    path = os.path.join(folder, "generation_config.json")
    generation = read_json(path)
    generation.pop("_from_model_config", None)
    # (T5's tiny vocabulary spells words from several pieces each, so it repeats trigrams only.)
    generation["no_repeat_ngram_size"] = 3 if family in ("t5", "longt5") else 1
    with open(path, "w") as f:
        json.dump(generation, f, indent=2)
    model = model_class.from_pretrained(folder)
    if family == "t5" and Version(transformers.__version__) >= Version("5"):
        # transformers 5's decoder cache has one layer per encoder layer (num_layers): tiny-t5's third decoder layer
        # raises IndexError in DynamicCache.update. Decoding without the cache computes the same ids.
        model.generation_config.use_cache = False
    return tokenizer, model


@pytest.mark.parametrize("family", ["pegasus", "bart", "t5", "pegasus_x", "longt5"])
def test_fitsum_eval_equals_seq2seq_trainer_evaluate(tmp_path, family):
    records = read_jsonl(shared_path("data", "samsum", "test.jsonl"))[:COUNT]
    folder = str(tmp_path / "model")
    tokenizer, model = summary_word_model(records, folder, family, tmp_path)
    # The tiny BART has 64 learned positions: sources are cut to them (fitsum would lower the length itself, warning).
    # T5's relative positions have no limit.
    max_source = min(MAX_SOURCE, getattr(model.config, "max_position_embeddings", MAX_SOURCE))
    from transformers import DataCollatorForSeq2Seq
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    captured = {}

    def compute_metrics(eval_preds):  # run_summarization.py's, with exact means (see the module docstring)
        preds, labels = eval_preds
        preds = np.where(preds != -100, preds, tokenizer.pad_token_id)
        preds = eos_padding_as_pad(preds, tokenizer)
        labels = np.where(labels != -100, labels, tokenizer.pad_token_id)
        decoded_preds = [p.strip() for p in tokenizer.batch_decode(preds, skip_special_tokens=True)]
        decoded_labels = [l.strip() for l in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        scores = [scorer.score(l, p) for p, l in zip(decoded_preds, decoded_labels)]
        result = {k: float(np.mean([s[k].fmeasure for s in scores])) * 100 for k in scores[0]}
        result["gen_len"] = float(np.mean([np.count_nonzero(p != tokenizer.pad_token_id) for p in preds]))
        captured["preds"] = preds
        return result

    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "hf"), report_to=[], use_cpu=True, disable_tqdm=True,
                                    per_device_eval_batch_size=BATCH, predict_with_generate=True,
                                    generation_max_length=MAX_LENGTH, generation_num_beams=BEAMS)
    trainer = Seq2SeqTrainer(model=model, args=args, data_collator=collator, compute_metrics=compute_metrics)
    want = trainer.evaluate(Tokenized(tokenizer, records, max_source, PREFIX[family]))

    data = write_jsonl(tmp_path / "test.jsonl", records)
    fitsum("eval", "--model", folder, "--test_file", data, "--source_prefix", PREFIX[family],
           "--per_device_eval_batch_size", BATCH, "--num_beams",
           BEAMS, "--max_length", MAX_LENGTH, "--max_source_length", max_source, "--max_target_length", MAX_TARGET,
           "--predictions_file", tmp_path / "pred.jsonl", "--metrics_file", tmp_path / "metrics.json")
    got = read_json(tmp_path / "metrics.json")
    predictions = read_jsonl(tmp_path / "pred.jsonl")

    for i, p in enumerate(predictions):
        hf = [t for t in captured["preds"][i].tolist()]
        ids = p["generated_ids"]
        assert hf[:len(ids)] == ids and all(t == tokenizer.pad_token_id for t in hf[len(ids):]), \
            f"record {i}: generated ids differ\n fitsum {ids}\n hf     {hf}"
    assert_close(got["eval_loss"], want["eval_loss"], 1e-5, "eval_loss")
    for key in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        assert_close(got[f"eval_{key}"], want[f"eval_{key}"], 1e-9, f"eval_{key}")
    assert_close(got["eval_gen_len"], want["eval_gen_len"], 1e-12, "eval_gen_len")
    assert want["eval_rouge1"] > 0, "ROUGE is 0: the comparison would not see a difference in scoring"
