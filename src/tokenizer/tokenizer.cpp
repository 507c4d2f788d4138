// Implements include/fitsum/tokenizer/tokenizer.h: the functions all families share and the choice of family for a
// folder (tokenizer_config.json's tokenizer_class, else config.json's model_type, else the files present).
#include "fitsum/tokenizer/tokenizer.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "fitsum/tokenizer/bart_tokenizer.h"
#include "fitsum/tokenizer/pegasus_tokenizer.h"
#include "fitsum/tokenizer/t5_tokenizer.h"
#include "fitsum/util/files.h"

namespace fitsum::tokenizer {

namespace {

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  std::string out;
  std::size_t start = 0;
  for (std::size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, start)) {
    out.append(text, start, pos - start);
    out.append(to);
    start = pos + from.size();
  }
  if (start == 0) return;
  out.append(text, start, std::string::npos);
  text = std::move(out);
}

// A string field of a JSON file's top-level object, "" when absent; throws naming the file when it is not a string.
std::string string_field(const fs::path& file, const char* key) {
  const auto json = util::read_json_file(file);
  if (!json.is_object()) throw std::runtime_error("'" + file.string() + "' is not a JSON object");
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return "";
  if (!it->is_string()) throw std::runtime_error("'" + file.string() + "': " + key + " is not a string");
  return it->get<std::string>();
}

// "bart", "t5", "pegasus" or "" from what the folder says about itself.
std::string declared_family(const fs::path& dir) {
  if (util::folder_has_file(dir, "tokenizer_config.json")) {
    const std::string name = string_field(dir / "tokenizer_config.json", "tokenizer_class");
    if (name.rfind("Bart", 0) == 0 || name.rfind("Roberta", 0) == 0 || name.rfind("GPT2", 0) == 0) return "bart";
    if (name.rfind("T5", 0) == 0) return "t5";
    if (name.rfind("Pegasus", 0) == 0) return "pegasus";
  }
  if (util::folder_has_file(dir, "config.json")) {
    const std::string type = string_field(dir / "config.json", "model_type");
    if (type == "bart" || type == "t5" || type == "pegasus") return type;
    if (type == "mt5") return "t5";
  }
  return "";
}

}  // namespace

std::string Tokenizer::decode(const std::vector<std::int64_t>& ids, const DecodeOptions& options) const {
  std::vector<TokenId> narrow;
  narrow.reserve(ids.size());
  for (const std::int64_t id : ids) {
    check_token_id(id, vocab_size());
    narrow.push_back(static_cast<TokenId>(id));
  }
  return decode(narrow, options);
}

bool Tokenizer::is_empty_text(const std::vector<TokenId>& ids) const { return ids == encode(""); }

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& dir) {
  std::string family = declared_family(dir);
  if (family.empty()) {
    if (util::folder_has_file(dir, "vocab.json") || util::folder_has_file(dir, "tokenizer.json")) family = "bart";
    // spiece.model alone: the family fitsum has always assumed for it.
    if (util::folder_has_file(dir, "spiece.model")) family = "pegasus";
  }
  if (family == "bart") return std::make_unique<BartTokenizer>(BartTokenizer::from_folder(dir));
  if (family == "t5") return std::make_unique<T5Tokenizer>(T5Tokenizer::from_folder(dir));
  if (family == "pegasus") return std::make_unique<PegasusTokenizer>(PegasusTokenizer::from_folder(dir));
  throw std::runtime_error("no tokenizer in '" + dir.string() +
                           "': expected spiece.model (PEGASUS, T5), tokenizer.json or vocab.json + merges.txt "
                           "(BART); pass --tokenizer_name with a folder that has one");
}

bool has_tokenizer(const fs::path& dir) {
  std::error_code error;
  const auto present = [&](const char* name) { return fs::exists(fs::symlink_status(dir / name, error)); };
  return present("spiece.model") || present("tokenizer.json") || (present("vocab.json") && present("merges.txt"));
}

void check_token_id(std::int64_t id, TokenId vocab_size) {
  if (id < 0 || id >= vocab_size) {
    throw std::invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary 0.." +
                                std::to_string(vocab_size - 1) +
                                " (label padding -100 must be replaced by the pad id before decoding)");
  }
}

bool truncate_keeping_eos(std::vector<TokenId>& ids, std::size_t max_length) {
  if (max_length == 0) {
    throw std::invalid_argument("a maximum length of 0 leaves no room for </s>; use at least 1");
  }
  if (ids.size() <= max_length) return false;
  const TokenId last = ids.back();
  ids.resize(max_length);
  ids.back() = last;
  return true;
}

std::string clean_up_tokenization(std::string text) {
  // Same replacements in the same order as HF; each one runs over the result of the previous.
  static constexpr std::string_view replacements[][2] = {{" .", "."},     {" ?", "?"},     {" !", "!"},   {" ,", ","},
                                                         {" ' ", "'"},    {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"},
                                                         {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& pair : replacements) replace_all(text, pair[0], pair[1]);
  return text;
}

}  // namespace fitsum::tokenizer
