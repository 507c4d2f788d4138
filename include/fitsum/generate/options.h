// Decoding options for greedy and beam search, with the names and meanings of Hugging Face's GenerationConfig
// (see docs/generate.md for the transformers versions each setting equals), validated in one place, and read from a
// model folder's generation_config.json / config.json with HF's precedence. The strategies themselves live in
// greedy_search.h and beam_search.h; generate.h picks one from num_beams.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace fitsum::model {
struct ModelConfig;
}

namespace fitsum::generate {

// HF's `early_stopping`, which accepts False, True and "never". It decides when a batch entry's beam search is done
// once it holds num_beams finished hypotheses (BeamHypotheses.is_done).
enum class EarlyStopping {
  heuristic,  // False (the default): done when the best running score, normalised by the current length, cannot
              // beat the worst finished hypothesis
  on_full,    // True: done as soon as num_beams hypotheses are finished
  never,      // "never": done only when no running hypothesis can still win; for length_penalty > 0 the bound
              // divides by max_length
};

// "false", "true" or "never", as HF writes the value.
const char* to_string(EarlyStopping early_stopping);

// The length that beam search divides a hypothesis's score by (to the power length_penalty). transformers changed it
// in 4.36 / 4.37 (PRs #27351, #27808); the two agree on every hypothesis that ends in eos and differ for beams still
// open at max_length and for early_stopping "never"'s bound.
enum class BeamLength {
  generated,  // transformers >= 4.37 (the default): the tokens after the decoder start token, eos included; open
              // beams at max_length count one token less than `classic`, and "never" bounds with max_length - 1
  classic,    // transformers < 4.36 (the summarization book's): all tokens, start token included, eos not
};

// "generated" or "classic"; parse_beam_length throws std::invalid_argument naming `what` for other text.
const char* to_string(BeamLength length);
BeamLength parse_beam_length(const std::string& text, const std::string& what);

struct GenerationOptions {
  // Lengths count decoder positions, the decoder start token included, as HF's max_length / min_length do for
  // encoder-decoders. The default is GenerationConfig's.
  std::int64_t max_length = 20;
  // When set, wins over max_length (as in HF): max_length = 1 + max_new_tokens, the 1 being the start token.
  std::optional<std::int64_t> max_new_tokens;
  // eos is banned while a sequence is shorter than this (MinLengthLogitsProcessor). Above max_length it bans eos at
  // every step and each sequence runs to max_length, as in HF (warnings() says so).
  std::int64_t min_length = 0;
  // 1: greedy search; more: beam search with that many beams per source.
  std::int64_t num_beams = 1;
  // Beam search only: a finished hypothesis scores sum_logprobs / length^length_penalty, the length as beam_length
  // counts it. Positive values favour longer sequences.
  double length_penalty = 1.0;
  EarlyStopping early_stopping = EarlyStopping::heuristic;
  BeamLength beam_length = BeamLength::generated;
  // > 0: no n-gram of this size occurs twice in a sequence (NoRepeatNGramLogitsProcessor).
  std::int64_t no_repeat_ngram_size = 0;

  // Token ids. The defaults are PEGASUS's; generation_options_from_hf reads a checkpoint's.
  std::int64_t decoder_start_token_id = 0;
  std::int64_t eos_token_id = 1;
  std::int64_t pad_token_id = 0;
  // Forced at position max_length - 1 (ForcedEOSTokenLogitsProcessor); -1: none, GenerationConfig's default.
  std::int64_t forced_eos_token_id = -1;
  // Forced as the first generated token, right after the decoder start (ForcedBOSTokenLogitsProcessor; BART's
  // checkpoints set 0, <s>); -1: none.
  std::int64_t forced_bos_token_id = -1;

  // Incremental decoding with the key/value cache. Off recomputes every position at every step: slower, the same
  // tokens; kept for checking the cache.
  bool use_cache = true;

  // max_length after max_new_tokens is applied.
  std::int64_t effective_max_length() const;

  // Lengths and beams past this are refused: no model decodes 16M positions, and the bound keeps their arithmetic
  // (1 + max_new_tokens, 2 * num_beams candidates) within 64 bits.
  static constexpr std::int64_t kMaxLength = std::int64_t{1} << 24;

  // Throws std::invalid_argument with a sentence naming the option, its value and the rule it breaks: each setting
  // on its own (what flags are checked against before a model folder is read).
  void validate_values() const;
  // validate_values(); no two settings exclude each other (min_length above max_length is warnings()' case).
  void validate() const;
  // What generate() warns about and carries on with (min_length above max_length: "Unfeasible length
  // constraints"), one sentence each, for the caller to print once before generating.
  std::vector<std::string> warnings() const;
  // validate(), plus the checks that need the model: token ids inside the vocabulary, 2 * num_beams candidates
  // available per step, and enough decoder positions for max_length.
  void validate_for(const model::ModelConfig& config) const;
};

// The options HF's generate() starts from for a model folder, before explicit arguments: generation_config.json
// when the folder has one, config.json otherwise (GenerationConfig.from_model_config), GenerationConfig's defaults
// for fields neither sets. `generation_config_json` may be null (no such file). As generate() does for legacy files,
// a generation_config.json marked "_from_model_config" that disagrees with config.json yields to config.json.
// Settings that would change what greedy or beam search produce but that fitsum does not implement (do_sample,
// repetition_penalty, num_beam_groups, ...) are refused with the field's name. `source` names the folder in messages
// (or, for a model built from a config file, that file).
GenerationOptions generation_options_from_hf(const nlohmann::json& config_json,
                                             const nlohmann::json& generation_config_json,
                                             const std::string& source = "model folder");

// The resolved options, field by field, for printing at start-up.
nlohmann::json to_json(const GenerationOptions& options);

}  // namespace fitsum::generate
