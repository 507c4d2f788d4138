// PEGASUS's tokenizer from a tokenizers-format tokenizer.json, for model folders without spiece.model.
//
// transformers 5 saves PEGASUS's tokenizer as tokenizer.json alone (its tokenizers backend); earlier versions saved
// both files. That tokenizer.json is transformers' conversion of the SentencePiece model (PegasusConverter): a
// Unigram model whose vocabulary is the 103 reserved ids followed by SentencePiece's pieces from <unk> on, with
// their scores; the normalizer's Precompiled character map is SentencePiece's own; Metaspace stands for its
// whitespace escaping and dummy prefix. fitsum rebuilds the SentencePiece model from it and tokenizes with
// SentencePiece, so a folder with tokenizer.json alone gives the ids spiece.model gives (what the slow
// PegasusTokenizer gives; see docs/hf.md for where HF's fast tokenizer differs from it).
#pragma once

#include <filesystem>
#include <string>

namespace fitsum::tokenizer {

namespace fs = std::filesystem;

// The serialized SentencePiece ModelProto of the PEGASUS tokenizer in `tokenizer_json`, whose vocabulary starts with
// `reserved_ids` ids before SentencePiece's <unk> (103 for PEGASUS). Pieces: <pad> and </s> (control, SentencePiece
// ids 0 and 1), then the vocabulary from <unk> on; a piece scored exactly 0 after <unk> was a user-defined symbol
// (SentencePiece scores normal Unigram pieces below 0; PEGASUS's "<n>"), and becomes one again. Throws
// std::runtime_error naming the file and the field when the file is not such a tokenizer (another model type, no
// Precompiled normalizer, another layout), and when this fitsum was built without protobuf.
std::string pegasus_sentencepiece_from_tokenizer_json(const fs::path& tokenizer_json, int reserved_ids);

}  // namespace fitsum::tokenizer
