// Implements include/fitsum/generate/options.h. Defaults and field meanings are those of transformers'
// GenerationConfig; reading follows PreTrainedModel.from_pretrained (generation_config.json, else config.json).
#include "fitsum/generate/options.h"

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "fitsum/model/config.h"

namespace fitsum::generate {

using nlohmann::json;

const char* to_string(EarlyStopping early_stopping) {
  switch (early_stopping) {
    case EarlyStopping::heuristic:
      return "false";
    case EarlyStopping::on_full:
      return "true";
    case EarlyStopping::never:
      return "never";
  }
  return "false";
}

const char* to_string(BeamLength length) { return length == BeamLength::classic ? "classic" : "generated"; }

BeamLength parse_beam_length(const std::string& text, const std::string& what) {
  if (text == "generated") return BeamLength::generated;
  if (text == "classic") return BeamLength::classic;
  throw std::invalid_argument(what + " '" + text +
                              "' is not one of generated (transformers >= 4.37), classic (transformers < 4.36)");
}

std::int64_t GenerationOptions::effective_max_length() const {
  return max_new_tokens ? 1 + *max_new_tokens : max_length;
}

namespace {

void require(bool ok, const std::string& sentence) {
  if (!ok) throw std::invalid_argument(sentence);
}

std::string str(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

void GenerationOptions::validate_values() const {
  if (max_new_tokens) {
    require(*max_new_tokens >= 1, "max_new_tokens (" + std::to_string(*max_new_tokens) + ") must be at least 1");
    require(*max_new_tokens < kMaxLength,
            "max_new_tokens (" + std::to_string(*max_new_tokens) + ") must be below " + std::to_string(kMaxLength));
  } else {
    require(max_length >= 2, "max_length (" + std::to_string(max_length) +
                                 ") must be at least 2: the decoder start token and one generated token");
    require(max_length <= kMaxLength,
            "max_length (" + std::to_string(max_length) + ") must be at most " + std::to_string(kMaxLength));
  }
  require(min_length >= 0, "min_length (" + std::to_string(min_length) + ") must not be negative");
  require(num_beams >= 1, "num_beams (" + std::to_string(num_beams) + ") must be at least 1 (1 means greedy search)");
  require(num_beams <= kMaxLength,
          "num_beams (" + std::to_string(num_beams) + ") must be at most " + std::to_string(kMaxLength));
  require(std::isfinite(length_penalty), "length_penalty (" + str(length_penalty) + ") must be a finite number");
  require(no_repeat_ngram_size >= 0,
          "no_repeat_ngram_size (" + std::to_string(no_repeat_ngram_size) + ") must not be negative (0 turns it off)");
  for (const auto& [name, id] : {std::pair<const char*, std::int64_t>{"decoder_start_token_id", decoder_start_token_id},
                                 {"eos_token_id", eos_token_id},
                                 {"pad_token_id", pad_token_id}}) {
    require(id >= 0, std::string(name) + " (" + std::to_string(id) + ") must be a token id (0 or more)");
  }
  require(forced_eos_token_id >= -1,
          "forced_eos_token_id (" + std::to_string(forced_eos_token_id) + ") must be a token id, or -1 for none");
  require(forced_bos_token_id >= -1,
          "forced_bos_token_id (" + std::to_string(forced_bos_token_id) + ") must be a token id, or -1 for none");
}

void GenerationOptions::validate() const {
  // min_length above max_length is no error (warnings() says what generate() says): the values alone decide.
  validate_values();
}

void GenerationOptions::validate_for(const model::ModelConfig& config) const {
  validate();
  const auto vocab = config.vocab_size;
  for (const auto& [name, id] : {std::pair<const char*, std::int64_t>{"decoder_start_token_id", decoder_start_token_id},
                                 {"eos_token_id", eos_token_id},
                                 {"pad_token_id", pad_token_id},
                                 {"forced_eos_token_id", forced_eos_token_id},
                                 {"forced_bos_token_id", forced_bos_token_id}}) {
    require(id < vocab, std::string(name) + " (" + std::to_string(id) + ") is outside the model's vocabulary of " +
                            std::to_string(vocab) + " tokens");
  }
  require(num_beams <= vocab / 2, "num_beams (" + std::to_string(num_beams) +
                                      ") is too large: beam search ranks 2 * num_beams candidates per step and the "
                                      "vocabulary has " +
                                      std::to_string(vocab) + " tokens");
  // The last token is never fed back, so max_length - 1 decoder positions are embedded.
  const auto max_len = effective_max_length();
  require(max_len - 1 <= config.max_position_embeddings,
          "max_length (" + std::to_string(max_len) + ") needs " + std::to_string(max_len - 1) +
              " decoder positions; the model has max_position_embeddings " +
              std::to_string(config.max_position_embeddings));
}

std::vector<std::string> GenerationOptions::warnings() const {
  std::vector<std::string> out;
  const auto max_len = effective_max_length();
  if (min_length > max_len) {
    // generate()'s _validate_generated_length warns and goes on; MinLengthLogitsProcessor then bans eos at every
    // step, so each sequence stops at max_length (a forced eos still ends it there).
    out.push_back("Unfeasible length constraints: min_length (" + std::to_string(min_length) +
                  ") is larger than the maximum possible length (" + std::to_string(max_len) +
                  (max_new_tokens ? ", from max_new_tokens " + std::to_string(*max_new_tokens) : std::string()) +
                  "). Generation will stop at the defined maximum length. You should decrease the minimum length "
                  "and/or increase the maximum length");
  }
  return out;
}

// ---- Reading HF configuration files ----

namespace {

class FieldReader {
 public:
  FieldReader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  const json* find(const char* name) const {
    if (!j_.is_object()) return nullptr;
    const auto it = j_.find(name);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  [[noreturn]] void fail(const char* name, const json& value, const std::string& why) const {
    throw std::invalid_argument(source_ + ": field '" + name + "' has value " + value.dump() + ": " + why);
  }

  std::optional<std::int64_t> integer(const char* name) const {
    const auto* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) fail(name, *v, "expected an integer");
    return v->get<std::int64_t>();
  }

  std::optional<double> number(const char* name) const {
    const auto* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) fail(name, *v, "expected a number");
    return v->get<double>();
  }

  std::optional<bool> boolean(const char* name) const {
    const auto* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) fail(name, *v, "expected true or false");
    return v->get<bool>();
  }

  // eos_token_id and forced_eos_token_id may be lists in newer files; the first entry is the one used.
  std::optional<std::int64_t> token(const char* name) const {
    const auto* v = find(name);
    if (!v) return std::nullopt;
    if (v->is_array()) {
      if (v->empty() || !(*v)[0].is_number_integer()) fail(name, *v, "expected a token id or a list of token ids");
      if (v->size() > 1) fail(name, *v, "several end-of-sequence tokens are not supported; keep one");
      return (*v)[0].get<std::int64_t>();
    }
    return integer(name);
  }

  std::optional<EarlyStopping> early_stopping(const char* name) const {
    const auto* v = find(name);
    if (!v) return std::nullopt;
    if (v->is_boolean()) return v->get<bool>() ? EarlyStopping::on_full : EarlyStopping::heuristic;
    if (v->is_string() && v->get<std::string>() == "never") return EarlyStopping::never;
    fail(name, *v, "expected true, false or \"never\"");
  }

  // Refuses a field set to something other than its neutral value: fitsum would otherwise silently produce
  // different sequences than HF.
  void refuse_unless(const char* name, bool neutral, const std::string& why) const {
    if (!neutral) fail(name, *find(name), why);
  }

 private:
  const json& j_;
  std::string source_;
};

void refuse_unsupported(const FieldReader& r) {
  const std::string only =
      "fitsum implements greedy and beam search without it; remove the field or set it to "
      "its default";
  if (auto v = r.boolean("do_sample")) r.refuse_unless("do_sample", !*v, "sampling is not implemented; " + only);
  if (auto v = r.integer("num_beam_groups")) r.refuse_unless("num_beam_groups", *v <= 1, only);
  if (auto v = r.number("diversity_penalty")) r.refuse_unless("diversity_penalty", *v == 0.0, only);
  if (auto v = r.number("repetition_penalty")) r.refuse_unless("repetition_penalty", *v == 1.0, only);
  if (auto v = r.number("encoder_repetition_penalty")) r.refuse_unless("encoder_repetition_penalty", *v == 1.0, only);
  if (auto v = r.integer("encoder_no_repeat_ngram_size")) {
    r.refuse_unless("encoder_no_repeat_ngram_size", *v == 0, only);
  }
  if (auto v = r.integer("num_return_sequences")) {
    r.refuse_unless("num_return_sequences", *v == 1, "fitsum returns one sequence per source; " + only);
  }
  if (auto v = r.boolean("renormalize_logits")) r.refuse_unless("renormalize_logits", !*v, only);
  if (auto v = r.number("penalty_alpha")) r.refuse_unless("penalty_alpha", *v == 0.0, "contrastive search; " + only);
  for (const char* name :
       {"bad_words_ids", "force_words_ids", "constraints", "min_new_tokens", "suppress_tokens", "begin_suppress_tokens",
        "forced_decoder_ids", "sequence_bias", "exponential_decay_length_penalty", "max_time"}) {
    if (r.find(name)) r.refuse_unless(name, false, only);
  }
}

// GenerationConfig built from one file, GenerationConfig's defaults for what it leaves out.
GenerationOptions options_from(const json& j, const std::string& source) {
  const FieldReader r(j, source);
  refuse_unsupported(r);
  GenerationOptions o;
  if (auto v = r.integer("max_length")) o.max_length = *v;
  if (auto v = r.integer("max_new_tokens")) o.max_new_tokens = *v;
  if (auto v = r.integer("min_length")) o.min_length = *v;
  if (auto v = r.integer("num_beams")) o.num_beams = *v;
  if (auto v = r.number("length_penalty")) o.length_penalty = *v;
  if (auto v = r.early_stopping("early_stopping")) o.early_stopping = *v;
  if (auto v = r.integer("no_repeat_ngram_size")) o.no_repeat_ngram_size = *v;
  if (auto v = r.boolean("use_cache")) o.use_cache = *v;

  // generate() for encoder-decoders: decoder_start_token_id, else bos_token_id; pad falls back to eos.
  const auto eos = r.token("eos_token_id");
  if (!eos) {
    throw std::invalid_argument(source + " sets no eos_token_id; generation needs one to know where a sequence ends");
  }
  o.eos_token_id = *eos;
  if (auto v = r.integer("decoder_start_token_id")) {
    o.decoder_start_token_id = *v;
  } else if (auto bos = r.integer("bos_token_id")) {
    o.decoder_start_token_id = *bos;
  } else {
    throw std::invalid_argument(source +
                                " sets neither decoder_start_token_id nor bos_token_id; an encoder-decoder "
                                "needs one to start decoding");
  }
  o.pad_token_id = r.integer("pad_token_id").value_or(o.eos_token_id);
  o.forced_eos_token_id = r.token("forced_eos_token_id").value_or(-1);
  o.forced_bos_token_id = r.token("forced_bos_token_id").value_or(-1);
  // Not validated here: explicit options may still change what a file sets (validate() runs before decoding).
  return o;
}

bool same_generation(const GenerationOptions& a, const GenerationOptions& b) {
  return a.max_length == b.max_length && a.max_new_tokens == b.max_new_tokens && a.min_length == b.min_length &&
         a.num_beams == b.num_beams && a.length_penalty == b.length_penalty && a.early_stopping == b.early_stopping &&
         a.no_repeat_ngram_size == b.no_repeat_ngram_size && a.decoder_start_token_id == b.decoder_start_token_id &&
         a.eos_token_id == b.eos_token_id && a.pad_token_id == b.pad_token_id &&
         a.forced_eos_token_id == b.forced_eos_token_id && a.forced_bos_token_id == b.forced_bos_token_id;
}

}  // namespace

GenerationOptions generation_options_from_hf(const json& config_json, const json& generation_config_json,
                                             const std::string& source) {
  // `source` is a folder, or (a model built from a config file) that file.
  const bool is_file = source.size() > 5 && source.compare(source.size() - 5, 5, ".json") == 0;
  const std::string config_name = is_file ? source : source + "/config.json";
  const bool has_generation_config = generation_config_json.is_object() && !generation_config_json.empty();
  if (!has_generation_config) {
    return options_from(config_json, config_name);
  }
  auto from_file = options_from(generation_config_json, source + "/generation_config.json");
  const auto legacy = generation_config_json.find("_from_model_config");
  if (legacy != generation_config_json.end() && legacy->is_boolean() && legacy->get<bool>()) {
    // generate() re-derives such a file from config.json and, when the two disagree, uses config.json's settings
    // (HF's deprecated "modified the pretrained model configuration" path).
    auto from_config = options_from(config_json, config_name);
    if (!same_generation(from_file, from_config)) return from_config;
  }
  return from_file;
}

json to_json(const GenerationOptions& o) {
  json j;
  j["max_length"] = o.effective_max_length();
  j["max_new_tokens"] = o.max_new_tokens ? json(*o.max_new_tokens) : json();
  j["min_length"] = o.min_length;
  j["num_beams"] = o.num_beams;
  j["length_penalty"] = o.length_penalty;
  j["early_stopping"] =
      o.early_stopping == EarlyStopping::never ? json("never") : json(o.early_stopping == EarlyStopping::on_full);
  j["beam_length"] = to_string(o.beam_length);
  j["no_repeat_ngram_size"] = o.no_repeat_ngram_size;
  j["decoder_start_token_id"] = o.decoder_start_token_id;
  j["eos_token_id"] = o.eos_token_id;
  j["pad_token_id"] = o.pad_token_id;
  j["forced_eos_token_id"] = o.forced_eos_token_id >= 0 ? json(o.forced_eos_token_id) : json();
  j["forced_bos_token_id"] = o.forced_bos_token_id >= 0 ? json(o.forced_bos_token_id) : json();
  j["use_cache"] = o.use_cache;
  return j;
}

}  // namespace fitsum::generate
