"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/ from the project's own data: small valid
inputs of each format, so that fuzzing starts from what real files look like. Run from the project root with
python3 (the .bin seeds are copies of tests/data/fixtures/torch-save):  /usr/bin/python3 fuzz/make_seeds.py
"""
import json
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def write(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))


def safetensors(tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text.encode() + b"".join(blobs)


def samsum(split, count):
    with open(os.path.join(ROOT, "data", "samsum", split + ".jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(count), f)]


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    # safetensors: dtypes, shapes (scalar, empty, 2-D), metadata.
    write("safetensors", "two_f32", safetensors({"a": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
                                                 "b": ("F32", [2], struct.pack("<2f", 5, 6))}, {"format": "pt"}))
    write("safetensors", "mixed", safetensors({"h": ("F16", [3], b"\x00\x3c" * 3), "bf": ("BF16", [1, 2], b"\x80\x3f" * 2),
                                               "i": ("I64", [], struct.pack("<q", 7)), "z": ("F32", [0, 4], b""),
                                               "m": ("BOOL", [2], b"\x01\x00")}))
    write("safetensors", "empty", safetensors({}))
    # pytorch_model.bin: what torch.save writes (see tests/data/fixtures/torch-save).
    cases = os.path.join(ROOT, "tests", "data", "fixtures", "torch-save")
    for name in sorted(os.listdir(cases)):
        if name.endswith(".bin"):
            with open(os.path.join(cases, name), "rb") as f:
                write("pytorch_bin", name, f.read())
    # config.json [NUL generation_config.json]
    pegasus = open(os.path.join(ROOT, "data", "pegasus", "config.json"), "rb").read()
    generation = open(os.path.join(ROOT, "data", "pegasus", "generation_config.json"), "rb").read()
    odd = open(os.path.join(ROOT, "tests", "data", "fixtures", "odd-pegasus", "config.json"), "rb").read()
    write("config", "pegasus_with_generation", pegasus + b"\0" + generation)
    write("config", "odd_pegasus", odd)
    write("config", "overrides", "dropout=0.0,attention_dropout=0.0,embedding_padding_idx=none")
    # records: first byte 0 jsonl, 1 json, 2 csv; plus 3, 4, 5 for the same formats gzip-compressed by the target
    records = samsum("validation", 3)
    write("records", "jsonl", b"\0" + "".join(json.dumps(r) + "\n" for r in records).encode())
    write("records", "json_array", b"\1" + json.dumps(records).encode())
    write("records", "json_data", b"\1" + json.dumps({"version": 1, "data": records}).encode())
    csv = "id,dialogue,summary\r\n" + "".join(
        '%s,"%s","%s"\r\n' % (r["id"], r["dialogue"].replace('"', '""'), r["summary"].replace('"', '""')) for r in records)
    write("records", "csv", b"\2" + csv.encode())
    write("records", "jsonl_gzip", b"\3" + "".join(json.dumps(r) + "\n" for r in records).encode())
    write("records", "csv_gzip", b"\5" + csv.encode())
    write("records", "pretokenized", b"\0" + b'{"input_ids": [5, 6, 1], "attention_mask": [1, 1, 1], "labels": [7, -100]}\n'
          b'{"input_ids": "[8, 1]"}\n')
    # tokenizer: 2 bytes of max_length, then text
    for i, r in enumerate(samsum("validation", 4)):
        write("tokenizer", "dialogue%d" % i, struct.pack("<H", [3, 64, 600, 2000][i]) + r["dialogue"].encode())
    write("tokenizer", "special", struct.pack("<H", 16) + "<mask_1> a </s> b <unk_7> <pad>\n\u00e9\u2047 x".encode())
    # bart_tokenizer: the same layout; text with <mask>, a long word, spaces GPT-2's pattern treats specially
    for i, r in enumerate(samsum("validation", 4)):
        write("bart_tokenizer", "dialogue%d" % i, struct.pack("<H", [0, 62, 598, 1998][i]) + r["dialogue"].encode())
    write("bart_tokenizer", "special",
          struct.pack("<H", 14) + "<s>a <mask> b</s> <pad>\u00a0\u0085 x  \n\n y's 12345 \U0001F600".encode())
    write("bart_tokenizer", "long_word", struct.pack("<H", 30) + ("abcdefghij" * 300).encode())
    # rouge: option byte, reference NUL prediction
    for i, r in enumerate(samsum("test", 4)):
        write("rouge", "pair%d" % i, bytes([i]) + r["summary"].encode() + b"\0" + r["dialogue"][:300].encode())


if __name__ == "__main__":
    main()
