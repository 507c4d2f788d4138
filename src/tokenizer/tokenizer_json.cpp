#include "fitsum/tokenizer/tokenizer_json.h"

#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"

#ifdef FITSUM_WITH_PROTOBUF
#include <google/protobuf/stubs/strutil.h>

#include "src/tokenizer/sentencepiece_model.pb.h"
#endif

namespace fitsum::tokenizer {

#ifdef FITSUM_WITH_PROTOBUF
namespace {

using nlohmann::json;

class Reader {
 public:
  explicit Reader(const fs::path& file) : file_(file.string()) {}

  [[noreturn]] void fail(const std::string& field, const std::string& reason) const {
    throw std::runtime_error(file_ + ": " + field + ": " + reason +
                             "; fitsum reads PEGASUS's tokenizer.json as transformers writes it (or pass "
                             "tokenizer_name with a folder that has spiece.model)");
  }
  const json& member(const json& object, const std::string& key, const std::string& field) const {
    if (!object.is_object() || !object.contains(key)) fail(field, "missing");
    return object.at(key);
  }
  std::string string(const json& value, const std::string& field) const {
    if (!value.is_string()) fail(field, "is not a string");
    return value.get<std::string>();
  }

 private:
  std::string file_;
};

// The component of `type` in a normalizer or pre-tokenizer: itself, or a member of its Sequence.
const json* find_component(const json& component, std::string_view type, const char* sequence_key) {
  if (!component.is_object()) return nullptr;
  const auto t = component.find("type");
  if (t != component.end() && t->is_string() && *t == type) return &component;
  const auto members = component.find(sequence_key);
  if (members == component.end() || !members->is_array()) return nullptr;
  for (const auto& member : *members) {
    if (const json* found = find_component(member, type, sequence_key)) return found;
  }
  return nullptr;
}

// SentencePiece's remove_extra_whitespaces, as transformers' converter writes it: a Replace of " {2,}".
bool collapses_spaces(const json& normalizer) {
  const json* replace = find_component(normalizer, "Replace", "normalizers");
  if (replace == nullptr) return false;
  const auto pattern = replace->find("pattern");
  if (pattern == replace->end() || !pattern->is_object()) return false;
  const auto regex = pattern->find("Regex");
  return regex != pattern->end() && regex->is_string() && *regex == " {2,}";
}

// SentencePiece's add_dummy_prefix: Metaspace's add_prefix_space (tokenizers < 0.19) or prepend_scheme.
bool adds_dummy_prefix(const json& metaspace) {
  if (const auto old = metaspace.find("add_prefix_space"); old != metaspace.end() && old->is_boolean()) {
    return old->get<bool>();
  }
  const auto scheme = metaspace.find("prepend_scheme");
  return scheme != metaspace.end() && scheme->is_string() && (*scheme == "always" || *scheme == "first");
}

// The pieces and trainer settings of the Unigram model: <pad>, </s>, then the vocabulary from <unk> on.
void add_model(const Reader& reader, const json& document, int reserved_ids, spm::ModelProto& proto) {
  const json& model = reader.member(document, "model", "model");
  const std::string type = reader.string(reader.member(model, "type", "model.type"), "model.type");
  if (type != "Unigram") reader.fail("model.type", "is " + type + ", not Unigram");
  const json& vocab = reader.member(model, "vocab", "model.vocab");
  if (!vocab.is_array()) reader.fail("model.vocab", "is not a list");
  const json& unk = reader.member(model, "unk_id", "model.unk_id");
  if (!unk.is_number_integer() || unk.get<std::int64_t>() != reserved_ids + 2) {
    reader.fail("model.unk_id",
                "is " + unk.dump() + ", PEGASUS's layout has <unk> at " + std::to_string(reserved_ids + 2));
  }
  const auto unk_id = static_cast<std::size_t>(reserved_ids + 2);
  if (vocab.size() <= unk_id) reader.fail("model.vocab", "has " + std::to_string(vocab.size()) + " entries");
  bool byte_fallback = false;
  if (const auto b = model.find("byte_fallback"); b != model.end() && !b->is_null()) {
    if (!b->is_boolean()) reader.fail("model.byte_fallback", "is not true or false");
    byte_fallback = b->get<bool>();
  }
  const auto entry = [&](std::size_t i) -> std::pair<std::string, double> {
    const json& e = vocab[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number()) {
      reader.fail("model.vocab[" + std::to_string(i) + "]", "is not a [piece, score] pair");
    }
    return {e[0].get<std::string>(), e[1].get<double>()};
  };
  if (entry(0).first != "<pad>" || entry(1).first != "</s>" || entry(unk_id).first != "<unk>") {
    reader.fail("model.vocab", "does not start with PEGASUS's <pad>, </s> and have <unk> at " + std::to_string(unk_id));
  }
  using Piece = spm::ModelProto::SentencePiece;
  const auto add = [&](const std::string& piece, double score, Piece::Type piece_type) {
    auto* p = proto.add_pieces();
    p->set_piece(piece);
    p->set_score(static_cast<float>(score));
    p->set_type(piece_type);
  };
  add("<pad>", 0.0, Piece::CONTROL);
  add("</s>", 0.0, Piece::CONTROL);
  add("<unk>", entry(unk_id).second, Piece::UNKNOWN);
  for (std::size_t i = unk_id + 1; i < vocab.size(); ++i) {
    const auto [piece, score] = entry(i);
    if (piece.empty()) reader.fail("model.vocab[" + std::to_string(i) + "]", "is an empty piece");
    add(piece, score, score == 0.0 ? Piece::USER_DEFINED : Piece::NORMAL);
  }
  auto* trainer = proto.mutable_trainer_spec();
  trainer->set_model_type(spm::TrainerSpec::UNIGRAM);
  trainer->set_vocab_size(proto.pieces_size());
  trainer->set_byte_fallback(byte_fallback);
  trainer->set_pad_id(0);
  trainer->set_eos_id(1);
  trainer->set_unk_id(2);
  trainer->set_bos_id(-1);
}

// SentencePiece's normalizer: the Precompiled character map, and what Metaspace and Replace stand for.
void add_normalizer(const Reader& reader, const json& document, spm::ModelProto& proto) {
  const json& normalizer = reader.member(document, "normalizer", "normalizer");
  const json* precompiled = find_component(normalizer, "Precompiled", "normalizers");
  if (precompiled == nullptr) reader.fail("normalizer", "has no Precompiled character map (SentencePiece's)");
  const std::string encoded =
      reader.string(reader.member(*precompiled, "precompiled_charsmap", "normalizer.precompiled_charsmap"),
                    "normalizer.precompiled_charsmap");
  std::string charsmap;
  if (!google::protobuf::Base64Unescape(encoded, &charsmap) || charsmap.empty()) {
    reader.fail("normalizer.precompiled_charsmap", "is not base64");
  }
  const json& pre_tokenizer = reader.member(document, "pre_tokenizer", "pre_tokenizer");
  const json* metaspace = find_component(pre_tokenizer, "Metaspace", "pretokenizers");
  if (metaspace == nullptr) reader.fail("pre_tokenizer", "has no Metaspace (SentencePiece's whitespace escaping)");
  const std::string replacement =
      reader.string(reader.member(*metaspace, "replacement", "pre_tokenizer.replacement"), "pre_tokenizer.replacement");
  if (replacement != "\xE2\x96\x81") reader.fail("pre_tokenizer.replacement", "is not U+2581");
  auto* spec = proto.mutable_normalizer_spec();
  spec->set_precompiled_charsmap(charsmap);
  spec->set_add_dummy_prefix(adds_dummy_prefix(*metaspace));
  spec->set_remove_extra_whitespaces(collapses_spaces(normalizer));
  spec->set_escape_whitespaces(true);
}

}  // namespace

std::string pegasus_sentencepiece_from_tokenizer_json(const fs::path& tokenizer_json, int reserved_ids) {
  const Reader reader(tokenizer_json);
  const json document = util::read_json_file(tokenizer_json);
  spm::ModelProto proto;
  add_model(reader, document, reserved_ids, proto);
  add_normalizer(reader, document, proto);
  std::string serialized;
  if (!proto.SerializeToString(&serialized)) reader.fail("model", "cannot be serialized as a SentencePiece model");
  return serialized;
}

#else

std::string pegasus_sentencepiece_from_tokenizer_json(const fs::path& tokenizer_json, int) {
  throw std::runtime_error(tokenizer_json.string() +
                           ": this fitsum was built without protobuf (libprotobuf-dev, protobuf-compiler), which "
                           "reading tokenizer.json needs; pass tokenizer_name with a folder that has spiece.model");
}

#endif

}  // namespace fitsum::tokenizer
