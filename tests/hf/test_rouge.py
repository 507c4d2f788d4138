"""ROUGE: `fitsum rouge` equals Google's rouge_score (RougeScorer, the package behind evaluate's "rouge") on every
record, stemmed and not, for rouge1/2/L/Lsum. Predictions: LEAD-3 of the SAMSum test and validation dialogues.
ROUGE-Lsum over sentences: with nltk's Punkt splitter when its data is installed (run_summarization.py's
postprocess_text); Punkt's data is not on PyPI, so otherwise the texts carry their sentences on separate lines."""
import pytest
from rouge_score import rouge_scorer

from harness import assert_close, fitsum, read_jsonl, shared_path, write_jsonl

TYPES = ["rouge1", "rouge2", "rougeL", "rougeLsum"]


def lead3(dialogue, sep):
    return sep.join(dialogue.splitlines()[:3])


def punkt_split():
    try:
        import nltk
        nltk.sent_tokenize("One. Two.")
    except LookupError:
        return None
    return lambda text: "\n".join(nltk.sent_tokenize(text))


def compare(tmp_path, records, stem, split_sentences=False):
    path = write_jsonl(tmp_path / "in.jsonl", records)
    args = ["rouge", "--input_file", path, "--per_record_file", tmp_path / "per.jsonl",
            "--use_stemmer", "true" if stem else "false"]
    if split_sentences:
        args.append("--rouge_split_sentences")
    fitsum(*args)
    got = read_jsonl(tmp_path / "per.jsonl")
    scorer = rouge_scorer.RougeScorer(TYPES, use_stemmer=stem)
    for i, (r, g) in enumerate(zip(records, got)):
        want = scorer.score(r["reference"], r["prediction"])
        for t in TYPES:
            for field in ("precision", "recall", "fmeasure"):
                assert abs(g[t][field] - getattr(want[t], field)) <= 1e-12, \
                    f"record {i} {t} {field}: fitsum {g[t][field]} rouge_score {getattr(want[t], field)}"
    assert len(got) == len(records)


@pytest.mark.parametrize("stem", [True, False], ids=["stemmed", "unstemmed"])
@pytest.mark.parametrize("split", ["test", "validation"])
def test_per_record_scores_equal_rouge_score(tmp_path, split, stem):
    records = [{"prediction": lead3(r["dialogue"], " "), "reference": r["summary"]}
               for r in read_jsonl(shared_path("data", "samsum", f"{split}.jsonl"))]
    compare(tmp_path, records, stem)


@pytest.mark.parametrize("stem", [True, False], ids=["stemmed", "unstemmed"])
def test_rouge_lsum_over_sentences(tmp_path, stem):
    samsum = read_jsonl(shared_path("data", "samsum", "test.jsonl"))
    splitter = punkt_split()
    if splitter is not None:
        records = [{"prediction": splitter(lead3(r["dialogue"], " ")), "reference": splitter(r["summary"])}
                   for r in samsum]
    else:
        # One sentence per line: the dialogue's turns, and the reference's sentences at ". ".
        records = [{"prediction": lead3(r["dialogue"], "\n"), "reference": r["summary"].replace(". ", ".\n")}
                   for r in samsum]
    compare(tmp_path, records, stem)
    assert any("\n" in r["reference"] for r in records)
