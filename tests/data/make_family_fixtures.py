#!/usr/bin/env python3
"""Reference fixtures for the BART and T5 families, computed by Hugging Face transformers itself.

Writes, under tests/data/fixtures/:
  tiny-bart/       BartForConditionalGeneration (post-LN, learned positions with offset 2, gelu, layernorm_embedding,
                   tied head + final_logits_bias) with a byte-level BPE trained on SAMSum (vocab.json, merges.txt,
                   tokenizer.json)
  tiny-t5/         T5ForConditionalGeneration v1.0 (relu, tied head with the d_model**-0.5 rescale) with a
                   SentencePiece model trained on SAMSum (spiece.model) and 100 <extra_id_*> tokens
  tiny-t5-v1_1/    the same with gated-gelu (wi_0, wi_1) and an untied head
  tiny-pegasus-x/  PegasusXForConditionalGeneration (blocks of 4 positions, staggered in layer 1, 3 global tokens,
                   computed sinusoidal positions, no attention biases), vocabulary of 96, no tokenizer
  tiny-longt5-local/, tiny-longt5-tglobal/
                   LongT5ForConditionalGeneration with local and transient-global attention (local_radius 2,
                   global_block_size 4), T5 v1.1's layers otherwise, vocabulary of 64, no tokenizer
each with config.json, generation_config.json, model.safetensors (save_pretrained) and case.json: the format of
../shared/fixtures/tiny-pegasus/case.json (see its README) plus 5-step Adafactor / AdamW trajectories, the
parameter names that get weight decay, and generate() outputs, including one with the family's generation defaults.
And under tests/data/tokenizers/: reference ids of the slow BartTokenizer and T5Tokenizer (see write_tokenizer_vectors);
tests/data/family_param_counts.json: transformers' parameter counts for the six configs under configs/.

Everything here is random or trained from SAMSum: no hub download. Run in a virtual environment that has
transformers (the versions used are recorded in every file it writes):

    apt-get install python3-torch python3-sentencepiece      (Debian's torch 1.13 and SentencePiece 0.1.97)
    python3 -m venv --system-site-packages VENV && VENV/bin/pip install transformers==4.35.2
    VENV/bin/python tests/data/make_family_fixtures.py [models] [tokenizers] [params]   (all three by default;
                                                  from the project root, ../shared beside it)

transformers 4.35 is the last release with the classic beam-search length normalisation that fitsum implements
(docs/generate.md) and runs on Debian's torch 1.13. The PEGASUS-X and LongT5 fixtures were written by transformers
4.47.1 (`VENV/bin/python tests/data/make_family_fixtures.py tiny-pegasus-x tiny-longt5-local tiny-longt5-tglobal`),
whose beam search divides by the generated length (4.37+); tests/model/family_parity_test.cpp reads the version from
case.json. Deterministic on one machine; float results may differ in the last
bits elsewhere, which the tests' tolerances allow.
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers
from transformers import (Adafactor, BartConfig, BartForConditionalGeneration, BartTokenizer, BartTokenizerFast,
                          LongT5Config, LongT5ForConditionalGeneration, PegasusXConfig,
                          PegasusXForConditionalGeneration, T5Config, T5ForConditionalGeneration, T5Tokenizer)
from transformers.pytorch_utils import ALL_LAYERNORM_LAYERS
from transformers.trainer_pt_utils import get_parameter_names

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.normpath(os.path.join(HERE, "..", ".."))
SHARED = os.path.normpath(os.path.join(PROJECT, "..", "shared"))
FIXTURES = os.path.join(HERE, "fixtures")
TOKENIZERS = os.path.join(HERE, "tokenizers")
import sentencepiece  # noqa: E402
import tokenizers  # noqa: E402

# Tokenizer vectors need the SentencePiece that fitsum links (Debian's 0.1.97): 0.2 breaks some ties of equal-score
# segmentations the other way ("*" + "*******" against "*******" + "*"), so its ids differ on a few SAMSum records.
VERSIONS = {"transformers": transformers.__version__, "torch": torch.__version__,
            "sentencepiece": sentencepiece.__version__, "tokenizers": tokenizers.__version__}


def samsum(split, source="shared"):
    folder = os.path.join(SHARED, "data", "samsum") if source == "shared" else os.path.join(PROJECT, "data", "samsum")
    with open(os.path.join(folder, split + ".jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# ---- tokenizers trained here (no hub): a byte-level BPE for tiny-bart, a SentencePiece model for tiny-t5 ----

def train_bart_bpe(out_dir, vocab_size=600):
    """Byte-level BPE with BART's special tokens first (<s> 0, <pad> 1, </s> 2, <unk> 3, <mask> 4). Kept when the
    folder has it already (delete vocab.json to train again)."""
    if os.path.exists(os.path.join(out_dir, "vocab.json")):
        return BartTokenizer(os.path.join(out_dir, "vocab.json"), os.path.join(out_dir, "merges.txt"))
    from tokenizers import ByteLevelBPETokenizer
    texts = [r["dialogue"] for r in samsum("train")[:3000]] + [r["summary"] for r in samsum("train")[:3000]]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], show_progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        bpe.save_model(tmp)
        shutil.copy(os.path.join(tmp, "vocab.json"), out_dir)
        shutil.copy(os.path.join(tmp, "merges.txt"), out_dir)
    # tokenizer.json as BartTokenizerFast writes it (RobertaProcessing, ByteLevel with trim_offsets)
    fast = BartTokenizerFast(os.path.join(out_dir, "vocab.json"), os.path.join(out_dir, "merges.txt"))
    fast.backend_tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    return BartTokenizer(os.path.join(out_dir, "vocab.json"), os.path.join(out_dir, "merges.txt"))


def train_t5_spm(out_dir, vocab_size=400):
    """A unigram SentencePiece model with T5's piece layout: <pad> 0, </s> 1, <unk> 2, no <s>. Kept when the folder
    has it already (delete spiece.model to train again)."""
    if os.path.exists(os.path.join(out_dir, "spiece.model")):
        return T5Tokenizer(os.path.join(out_dir, "spiece.model"), legacy=True)
    import sentencepiece as spm
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            for r in samsum("train")[:3000]:
                f.write(r["dialogue"].replace("\r\n", "\n") + "\n" + r["summary"] + "\n")
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(tmp, "spiece"), vocab_size=vocab_size,
                                       model_type="unigram", character_coverage=1.0, pad_id=0, eos_id=1, unk_id=2,
                                       bos_id=-1, pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>",
                                       normalization_rule_name="nmt_nfkc", num_threads=1, seed_sentencepiece_size=100000,
                                       minloglevel=2)
        shutil.copy(os.path.join(tmp, "spiece.model"), out_dir)
    return T5Tokenizer(os.path.join(out_dir, "spiece.model"), legacy=True)


# ---- model fixtures ----

BART = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=2,
            encoder_ffn_dim=64, decoder_ffn_dim=48, max_position_embeddings=64, activation_function="gelu",
            dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, scale_embedding=False,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_bos_token_id=0,
            forced_eos_token_id=2, no_repeat_ngram_size=3, num_beams=4, length_penalty=2.0, min_length=6,
            max_length=20, early_stopping=True, init_std=0.1)
T5_COMMON = dict(d_model=32, d_kv=6, d_ff=64, num_layers=2, num_decoder_layers=3, num_heads=4,
                 relative_attention_num_buckets=8, relative_attention_max_distance=20, dropout_rate=0.0,
                 layer_norm_epsilon=1e-6, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                 initializer_factor=1.0)
# PEGASUS-X and LongT5 at the tests' tiny widths, with blocks of a few positions so that the fixtures' sources (11 and
# 6 tokens) span several blocks and end inside one: PEGASUS-X's blocks of 4 (staggered in layer 1) with 3 global
# tokens, LongT5's windows of local_radius 2 (blocks of 3) and global blocks of 4.
PEGASUS_X = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=2,
                 encoder_ffn_dim=64, decoder_ffn_dim=48, max_position_embeddings=16384, activation_function="gelu",
                 dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, scale_embedding=True, block_size=4,
                 num_global_tokens=3, stagger_local_blocks=True, pad_token_id=0, eos_token_id=1,
                 decoder_start_token_id=0, forced_eos_token_id=1, init_std=0.1)
LONG_T5 = dict(T5_COMMON, local_radius=2, global_block_size=4, feed_forward_proj="gated-gelu",
               tie_word_embeddings=False)
PRETRAIN_STEPS = {"bart": 300, "t5": 400, "pegasus_x": 300, "longt5": 400}
CASES = {
    "tiny-bart": dict(family="bart", seed=1234, lr=1e-3, wd=0.01),
    "tiny-t5": dict(family="t5", seed=2345, lr=1e-3, wd=0.01, feed_forward_proj="relu", tie_word_embeddings=True),
    "tiny-t5-v1_1": dict(family="t5", seed=3456, lr=1e-3, wd=0.01, feed_forward_proj="gated-gelu",
                         tie_word_embeddings=False),
    "tiny-pegasus-x": dict(family="pegasus_x", seed=4567, lr=1e-3, wd=0.01, vocab_size=96, sources=(11, 6)),
    "tiny-longt5-local": dict(family="longt5", seed=5678, lr=1e-3, wd=0.01, vocab_size=64, sources=(11, 6),
                              encoder_attention_type="local"),
    "tiny-longt5-tglobal": dict(family="longt5", seed=6789, lr=1e-3, wd=0.01, vocab_size=64, sources=(11, 6),
                                encoder_attention_type="transient-global"),
}
# The fixtures that need no tokenizer of their own (PEGASUS-X's is PEGASUS's SentencePiece, LongT5's T5's): their
# vocabularies are their own small sizes.
NEW_FAMILIES = ("pegasus_x", "longt5")


def make_model(case, vocab_size):
    torch.manual_seed(case["seed"])
    if case["family"] == "bart":
        return BartForConditionalGeneration(BartConfig(vocab_size=vocab_size, **BART))
    if case["family"] == "pegasus_x":
        return PegasusXForConditionalGeneration(PegasusXConfig(vocab_size=vocab_size, **PEGASUS_X))
    if case["family"] == "longt5":
        return LongT5ForConditionalGeneration(LongT5Config(
            vocab_size=vocab_size, encoder_attention_type=case["encoder_attention_type"], **LONG_T5))
    config = T5Config(vocab_size=vocab_size, feed_forward_proj=case["feed_forward_proj"],
                      tie_word_embeddings=case["tie_word_embeddings"], **T5_COMMON)
    return T5ForConditionalGeneration(config)


def content_range(case, tokenizer_size):
    # ids that are ordinary text: past the special tokens (BART 0..4, T5 0..2). T5's copy task uses 40 of them: a
    # tiny T5 learns to copy from a large vocabulary much more slowly than a tiny BART.
    return (5, tokenizer_size) if case["family"] == "bart" else (3, 43)


def wrap(case, tokens):
    """The tokenizer's template around content ids: <s> x </s> for BART, x </s> for T5."""
    return [0] + tokens + [2] if case["family"] == "bart" else tokens + [1]


def pad_batch(rows, pad, width=None):
    width = width or max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
    return ids, mask


def pretrain(model, case, lo, hi):
    """A short copy task so that greedy and beam outputs are peaked rather than near-ties of a random model."""
    g = torch.Generator().manual_seed(case["seed"] + 7)
    steps = PRETRAIN_STEPS[case["family"]]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3 if case["family"] in ("bart", "pegasus_x") else 1e-2)
    pad = model.config.pad_token_id
    model.train()
    loss = None
    for _ in range(steps):
        rows = [wrap(case, torch.randint(lo, hi, (int(torch.randint(3, 10, (1,), generator=g)),),
                                         generator=g).tolist()) for _ in range(8)]
        ids, mask = pad_batch(rows, pad)
        labels = ids.masked_fill(mask == 0, -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return loss.item()


def sample(t):
    flat = t.detach().reshape(-1)
    idx = list(range(0, flat.numel(), max(1, flat.numel() // 16)))[:16]
    return {"index": idx, "value": [float(flat[i]) for i in idx], "sum": float(flat.double().sum()),
            "l2": float(flat.double().norm())}


def decay_names(model):
    """What the Trainer's create_optimizer decays: not LayerNorm (T5LayerNorm included) weights, no name with 'bias'
    (so T5's relative_attention_bias is not decayed either)."""
    names = get_parameter_names(model, ALL_LAYERNORM_LAYERS)
    return sorted(n for n in names if "bias" not in n)


def run_optimizer(kind, model_state, make, batch, case, steps=5):
    model = make()
    model.load_state_dict(model_state)
    model.train()
    decay = set(decay_names(model))
    groups = [{"params": [p for n, p in model.named_parameters() if n in decay], "weight_decay": case["wd"]},
              {"params": [p for n, p in model.named_parameters() if n not in decay], "weight_decay": 0.0}]
    if kind == "adafactor":  # what TrainingArguments(optim="adafactor") builds
        opt = Adafactor(groups, lr=case["lr"], scale_parameter=False, relative_step=False, warmup_init=False)
    else:  # optim="adamw_torch", the 4.35 default
        opt = torch.optim.AdamW(groups, lr=case["lr"], betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for _ in range(steps):
        out = model(**batch)
        losses.append(out.loss.item())
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    return losses, dict(model.named_parameters())


def generate_case(model, sources, **kwargs):
    out = model.generate(**sources, return_dict_in_generate=True, output_scores=True, **kwargs)
    result = {**kwargs, "sequences": out.sequences.tolist()}
    if kwargs.get("num_beams", 1) > 1:
        result["sequence_scores"] = out.sequences_scores.tolist()
    return result


def make_fixture(name, tokenizer_size):
    case = CASES[name]
    out_dir = os.path.join(FIXTURES, name)
    if case["family"] in NEW_FAMILIES:
        tokenizer_size = case["vocab_size"]
    model = make_model(case, tokenizer_size if case["family"] in ("bart",) + NEW_FAMILIES else tokenizer_size + 12)
    lo, hi = content_range(case, tokenizer_size)
    pre_loss = pretrain(model, case, lo, hi)
    model.save_pretrained(out_dir, safe_serialization=True)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    pad = model.config.pad_token_id

    g = torch.Generator().manual_seed(case["seed"] + 1)
    src_rows = [wrap(case, torch.randint(lo, hi, (n,), generator=g).tolist()) for n in case.get("sources", (9, 6))]
    lab_rows = [wrap(case, torch.randint(lo, hi, (n,), generator=g).tolist()) for n in (5, 3)]
    ids, mask = pad_batch(src_rows, pad)
    labels, _ = pad_batch(lab_rows, -100)
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}

    model.train()
    model.zero_grad(set_to_none=True)  # the copy task's last step left its gradients behind
    out = model(**batch, output_hidden_states=False)
    out.loss.backward()
    named = dict(model.named_parameters())
    grads = {k: p.grad for k, p in named.items() if p.grad is not None}
    probe = [k for k in named if ("layers.0." in k or "block.0." in k or "shared" in k or "layernorm_embedding" in k
                                  or "embed_positions" in k or "relative_attention_bias" in k or "lm_head" in k
                                  or "final_layer_norm" in k or "embed_global" in k or "encoder.layers.1." in k)
             and "k_proj.bias" not in k]
    probe = sorted(set(probe))

    make = lambda: make_model(case, model.config.vocab_size)  # noqa: E731
    ada_losses, ada_params = run_optimizer("adafactor", state, make, batch, case)
    adam_losses, adam_params = run_optimizer("adamw", state, make, batch, case)

    model.eval()
    with torch.no_grad():
        enc = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        gen_rows = [wrap(case, torch.randint(lo, hi, (n,), generator=g).tolist()) for n in (8, 5, 7, 3)]
        gids, gmask = pad_batch(gen_rows, pad)
        sources = {"input_ids": gids, "attention_mask": gmask}
        neutral = dict(no_repeat_ngram_size=0, min_length=0, early_stopping=False)
        if case["family"] == "bart":
            neutral["forced_bos_token_id"] = None
        generation = {
            "input_ids": gids.tolist(), "attention_mask": gmask.tolist(),
            "greedy": generate_case(model, sources, num_beams=1, max_length=14, **neutral),
            "beam": generate_case(model, sources, num_beams=4, max_length=14, length_penalty=0.8,
                                  **neutral),
            "beam_min_length": generate_case(model, sources, num_beams=3, max_length=14, length_penalty=1.2,
                                             **{**neutral, "min_length": 12}),
            "greedy_no_repeat_ngram": generate_case(model, sources, num_beams=1, max_length=14,
                                                    **{**neutral, "no_repeat_ngram_size": 2}),
            # the family's defaults from config.json / generation_config.json: nothing passed but the length
            "defaults": generate_case(model, sources, max_length=14),
            "defaults_config": {k: v for k, v in model.generation_config.to_dict().items()
                                if k in ("num_beams", "no_repeat_ngram_size", "min_length", "length_penalty",
                                         "early_stopping", "forced_bos_token_id", "forced_eos_token_id",
                                         "decoder_start_token_id", "eos_token_id", "pad_token_id")},
        }

    result = {
        "about": "Expected values computed by transformers for the checkpoint beside this file; float32 CPU, no "
                 "dropout. Format: ../../../../../shared/fixtures/README.md, plus 5 optimizer steps.",
        "versions": VERSIONS,
        "model_class": type(model).__name__,
        "input_ids": ids.tolist(), "attention_mask": mask.tolist(), "labels": labels.tolist(),
        "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(labels=labels).tolist(),
        "loss": out.loss.item(),
        "logits": {"shape": list(out.logits.shape), **sample(out.logits)},
        "encoder_last_hidden_state": sample(enc),
        "trainable_parameters": sum(p.numel() for p in model.parameters()),
        "grads": {k: sample(grads[k]) for k in probe},
        "grad_global_l2": float(torch.sqrt(sum((g_.double() ** 2).sum() for g_ in grads.values()))),
        "weight_decay_names": decay_names(model),
        "adafactor": {"learning_rate": case["lr"], "weight_decay": case["wd"], "steps": 5,
                      "settings": "transformers.Adafactor(lr, scale_parameter=False, relative_step=False, "
                                  "warmup_init=False), Trainer's weight-decay groups, no clipping, constant lr",
                      "losses_before_each_step": ada_losses,
                      "params_after_steps": {k: sample(ada_params[k]) for k in probe}},
        "adamw": {"learning_rate": case["lr"], "weight_decay": case["wd"], "steps": 5,
                  "settings": "torch.optim.AdamW(lr, betas=(0.9,0.999), eps=1e-8), Trainer's weight-decay groups, "
                              "no clipping, constant lr",
                  "losses_before_each_step": adam_losses,
                  "params_after_steps": {k: sample(adam_params[k]) for k in probe}},
        "pretrain": {"task": f"copy the source, {PRETRAIN_STEPS[case['family']]} AdamW steps",
                     "final_batch_loss": pre_loss},
        "generate": generation,
    }
    with open(os.path.join(out_dir, "case.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(name, "loss", result["loss"], "greedy", generation["greedy"]["sequences"][0], flush=True)


# ---- tokenizer vectors ----

EDGE_CASES = [
    "", " ", "  ", "\t", "\n", "\r\n", "a\r\nb", "Hello world", " Hello world", "Hello  world", "Hello world ",
    "Hello   \n  world", "trailing spaces   ", "   leading spaces", "tab\tinside", "x\u000by", "x\u000cy",
    "info sep\u001cone\u001dtwo\u001ethree\u001ffour", "next line\u0085here", "nbsp\u00a0here", "ogham\u1680space",
    "en\u2002quad", "line\u2028sep", "para\u2029sep", "narrow\u202fnbsp", "math\u205fspace", "ideo\u3000space",
    "zero\u200bwidth", "mongolian\u180eseparator",
    "I'm sure you're right, they've said he'll do it and she'd agree. It's Tom's.",
    "DON'T SHOUT I'M HERE", "rock 'n' roll", "'s 't 're", "numbers 12345 and 3.14159 and 1,000,000",
    "٣٤٥ arabic digits ٣", "Ⅻ roman numeral", "½ fraction", "emoji 😀😃🎉 and 👍🏽", "family 👨‍👩‍👧",
    "中文字符测试", "日本語のテキスト", "한국어 텍스트", "Привет, как дела?", "مرحبا بالعالم", "עברית",
    "Ｆｕｌｌｗｉｄｔｈ", "ﬁ ligature", "café naïve résumé", "e\u0301 combining", "<file_gif>", "<file_photo> ok",
    "http://example.com/path?q=1&r=2", "mail@example.com", "!!!???...", "--- *** ###", "a" * 300,
    # where the whitespace classes of Python's re (U+001C..U+001F), ICU (no U+000B, U+0085) and PCRE2's own \s
    # (U+180E) would split differently from the regex module's
    "a \u001cb", "a \u001fb", "a \u0085b", "a \u000bb", "a \u00a0b", "a\u180e \u180eb", "x \u180e\u180e y",
    "<s>", "</s>", "<pad>", "<unk>", "<mask>", "Hello <mask> world", "Hello<mask>world", "Hello   <mask>   world",
    "x </s> y", "a<s>b</s>c", "<|endoftext|>", "<extra_id_0>", "Hello <extra_id_0> world", "Hello<extra_id_1>world",
    "a <extra_id_99> b <extra_id_5>", "<extra_id_100>", "▁already▁marked", "\u2581", "tab\t<mask>\tx",
]


def fnv1a64(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little", signed=True):
            h ^= b
            h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def encode(tok, text, **kw):
    return tok(text, add_special_tokens=True, **kw)["input_ids"]


SAMPLE = {"train": 100, "validation": 20, "test": 20}  # records of the bundled data/samsum written out in full


def vectors(tok, with_decode_unskipped=True):
    """Full records: edge cases (with token strings) and the first records of the bundled SAMSum sample (ids,
    truncations, decodes)."""
    out = []
    texts = [("edge", t) for t in EDGE_CASES]
    for split, count in SAMPLE.items():
        for r in samsum(split, source="project")[:count]:
            texts.append((f"{split}:{r['id']}:dialogue", r["dialogue"]))
            texts.append((f"{split}:{r['id']}:summary", r["summary"]))
    for source, text in texts:
        ids = encode(tok, text)
        rec = {"source": source, "text": text, "ids": ids,
               "truncated_16": encode(tok, text, truncation=True, max_length=16),
               "decoded": tok.decode(ids, skip_special_tokens=True),
               "decoded_no_cleanup": tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)}
        if with_decode_unskipped:
            rec["decoded_with_special"] = tok.decode(ids, skip_special_tokens=False)
        if source == "edge":
            rec["tokens"] = tok.convert_ids_to_tokens(ids)
        out.append(rec)
    return out


HASH_CHUNK = 64  # records per hash line


def hashes(tok):
    """Every SAMSum record of ../shared (all splits), in chunks of HASH_CHUNK records: [split, index of the first
    record, records, tokens, FNV-1a 64 of the int32 ids of dialogue then summary of each record in order]."""
    out = []
    for split in ("train", "validation", "test"):
        records = samsum(split)
        for start in range(0, len(records), HASH_CHUNK):
            ids = []
            for r in records[start:start + HASH_CHUNK]:
                ids += encode(tok, r["dialogue"]) + encode(tok, r["summary"])
            out.append([split, start, len(records[start:start + HASH_CHUNK]), len(ids), fnv1a64(ids)])
    return out


def write_jsonl(path, header, records):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(header, ensure_ascii=False) + "\n")
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def write_tokenizer_vectors(bart_tiny, t5_tiny):
    """tests/data/tokenizers/:
      bart-gpt2.jsonl        BartTokenizer over data/gpt2 (GPT-2's vocab.json + merges.txt): full records
      bart-gpt2-samsum.jsonl the same tokenizer's id hashes for every SAMSum record of ../shared
      bart-tiny.jsonl        BartTokenizer over tests/data/fixtures/tiny-bart (the BPE trained here)
      t5-pegasus-spm.jsonl   T5Tokenizer over data/pegasus/spiece.model (a 96000-piece model with T5's layout)
      t5-pegasus-spm-samsum.jsonl  its id hashes for every SAMSum record
      t5-tiny.jsonl          T5Tokenizer over tests/data/fixtures/tiny-t5/spiece.model
    The first line of each file is a header: versions, tokenizer, vocabulary size, special ids."""
    os.makedirs(TOKENIZERS, exist_ok=True)
    gpt2 = BartTokenizer(os.path.join(PROJECT, "data", "gpt2", "vocab.json"),
                         os.path.join(PROJECT, "data", "gpt2", "merges.txt"))
    t5_big = T5Tokenizer(os.path.join(PROJECT, "data", "pegasus", "spiece.model"), legacy=True)

    def header(tok, files):
        return {"versions": VERSIONS, "class": type(tok).__name__, "files": files, "len": len(tok),
                "special_ids": {t: tok.convert_tokens_to_ids(t) for t in tok.all_special_tokens},
                "hash": "fnv1a64 over the ids as little-endian int32"}

    for name, tok, files, full in (
            ("bart-gpt2", gpt2, "data/gpt2/{vocab.json,merges.txt}", True),
            ("bart-tiny", bart_tiny, "tests/data/fixtures/tiny-bart/{vocab.json,merges.txt}", False),
            ("t5-pegasus-spm", t5_big, "data/pegasus/spiece.model", True),
            ("t5-tiny", t5_tiny, "tests/data/fixtures/tiny-t5/spiece.model", False)):
        write_jsonl(os.path.join(TOKENIZERS, name + ".jsonl"), header(tok, files), vectors(tok))
        if full:
            write_jsonl(os.path.join(TOKENIZERS, name + "-samsum.jsonl"), header(tok, files), hashes(tok))
        print("tokenizer vectors", name, flush=True)


def param_counts(names):
    """What transformers counts for each configs/<name>: its class, parameters with and without embeddings, buffers."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM
    from transformers.modeling_utils import no_init_weights
    models = {}
    for name in names:
        config = AutoConfig.from_pretrained(os.path.join(PROJECT, "configs", name))
        with no_init_weights(_enable=True):
            model = AutoModelForSeq2SeqLM.from_config(config)
        model.tie_weights()  # skipped under no_init_weights; from_pretrained ties them
        models[name] = {"class": type(model).__name__, "num_parameters": model.num_parameters(),
                        "num_parameters_exclude_embeddings": model.num_parameters(exclude_embeddings=True),
                        "buffers": {n: list(b.shape) for n, b in model.named_buffers()}}
        print(name, models[name]["num_parameters"], flush=True)
        del model
    return models


def write_param_counts():
    """tests/data/family_param_counts.json: what transformers counts for the six configs under configs/."""
    names = ["bart-large-cnn", "bart-base", "t5-small", "t5-base", "flan-t5-base", "flan-t5-large"]
    out = {"versions": VERSIONS, "models": param_counts(names)}
    with open(os.path.join(HERE, "family_param_counts.json"), "w") as f:
        json.dump(out, f, indent=1)


def write_relative_buckets():
    """tests/data/t5_relative_buckets.json: T5Attention._relative_position_bucket for relative positions
    (memory - query) -300..300, bidirectional (encoder) and causal (decoder), for T5's 32 buckets / distance 128 and
    the tiny fixtures' 8 / 20."""
    from transformers.models.t5.modeling_t5 import T5Attention
    relative = torch.arange(-300, 301)
    out = {"versions": VERSIONS, "relative_positions": relative.tolist(), "cases": []}
    for buckets, distance in ((32, 128), (8, 20)):
        for bidirectional in (True, False):
            b = T5Attention._relative_position_bucket(relative, bidirectional=bidirectional, num_buckets=buckets,
                                                      max_distance=distance)
            out["cases"].append({"num_buckets": buckets, "max_distance": distance, "bidirectional": bidirectional,
                                 "buckets": b.tolist()})
    with open(os.path.join(HERE, "t5_relative_buckets.json"), "w") as f:
        json.dump(out, f)


def main():
    which = sys.argv[1:] or ["models", "tokenizers", "params"]
    if "models" in which or "params" in which:
        write_relative_buckets()
    if "params" in which:
        write_param_counts()
    if which == ["params"]:
        return
    os.makedirs(FIXTURES, exist_ok=True)
    bart_dir = os.path.join(FIXTURES, "tiny-bart")
    t5_dir = os.path.join(FIXTURES, "tiny-t5")
    os.makedirs(bart_dir, exist_ok=True)
    os.makedirs(t5_dir, exist_ok=True)
    bart_tok = train_bart_bpe(bart_dir)
    t5_tok = train_t5_spm(t5_dir)
    # "models" makes them all; a fixture's name makes that one
    for name in CASES:
        if "models" in which or name in which:
            make_fixture(name, len(bart_tok) if CASES[name]["family"] == "bart" else len(t5_tok))
    if "tokenizers" in which:
        write_tokenizer_vectors(bart_tok, t5_tok)


if __name__ == "__main__":
    main()
