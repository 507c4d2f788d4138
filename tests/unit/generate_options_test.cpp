// Decoding options, logits processors and beam hypotheses on their own: validation sentences, HF's precedence of
// generation_config.json over config.json, the no-repeat n-gram ban, the min-length and forced-eos rules, and
// BeamHypotheses' keep-the-best / is_done arithmetic, against values worked out by hand from HF's code.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fitsum/generate/beam_search.h"
#include "fitsum/generate/logits_processors.h"
#include "fitsum/generate/options.h"
#include "fitsum/model/config.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

using generate::EarlyStopping;
using generate::GenerationOptions;
using nlohmann::json;

std::string validation_error(const GenerationOptions& options) {
  try {
    options.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(GenerationOptions, DefaultsAreValidAndHuggingFaces) {
  GenerationOptions o;
  EXPECT_EQ(validation_error(o), "");
  EXPECT_EQ(o.max_length, 20);
  EXPECT_EQ(o.num_beams, 1);
  EXPECT_EQ(o.length_penalty, 1.0);
  EXPECT_EQ(o.early_stopping, EarlyStopping::heuristic);
  EXPECT_EQ(o.forced_eos_token_id, -1);
  EXPECT_TRUE(o.use_cache);
}

// generate() only warns about a min_length it cannot reach ("Unfeasible length constraints") and stops at
// max_length; so does fitsum, with the warning for the caller to print once.
TEST(GenerationOptions, MinLengthAboveMaxLengthIsAWarningAsInHuggingFace) {
  GenerationOptions o;
  o.max_length = 10;
  o.min_length = 12;
  EXPECT_EQ(validation_error(o), "");
  ASSERT_EQ(o.warnings().size(), 1u);
  EXPECT_EQ(o.warnings()[0],
            "Unfeasible length constraints: min_length (12) is larger than the maximum possible length (10). "
            "Generation will stop at the defined maximum length. You should decrease the minimum length and/or "
            "increase the maximum length");
  o = {};
  o.max_new_tokens = 5;
  o.min_length = 7;
  EXPECT_EQ(validation_error(o), "");
  ASSERT_EQ(o.warnings().size(), 1u);
  EXPECT_NE(
      o.warnings()[0].find("min_length (7) is larger than the maximum possible length (6, from max_new_tokens 5)"),
      std::string::npos);
  o.min_length = 6;
  EXPECT_TRUE(o.warnings().empty());
}

TEST(GenerationOptions, ValidationSaysWhatIsWrong) {
  GenerationOptions o;
  o.min_length = -1;
  EXPECT_EQ(validation_error(o), "min_length (-1) must not be negative");
  o = {};
  o.max_length = 1;
  EXPECT_NE(validation_error(o).find("max_length (1) must be at least 2"), std::string::npos);
  o = {};
  o.max_new_tokens = 0;
  EXPECT_EQ(validation_error(o), "max_new_tokens (0) must be at least 1");
  o = {};
  o.num_beams = 0;
  EXPECT_NE(validation_error(o).find("num_beams (0) must be at least 1"), std::string::npos);
  o = {};
  o.length_penalty = std::nan("");
  EXPECT_NE(validation_error(o).find("length_penalty (nan) must be a finite number"), std::string::npos);
  o = {};
  o.no_repeat_ngram_size = -2;
  EXPECT_NE(validation_error(o).find("no_repeat_ngram_size (-2)"), std::string::npos);
  o = {};
  o.eos_token_id = -1;
  EXPECT_NE(validation_error(o).find("eos_token_id (-1) must be a token id"), std::string::npos);
  o = {};
  o.forced_eos_token_id = -3;
  EXPECT_NE(validation_error(o).find("forced_eos_token_id (-3)"), std::string::npos);
}

TEST(GenerationOptions, ValidationAgainstTheModel) {
  model::ModelConfig config;
  config.vocab_size = 50;
  config.max_position_embeddings = 32;
  GenerationOptions o;
  o.num_beams = 25;
  EXPECT_NO_THROW(o.validate_for(config));
  o.num_beams = 26;
  EXPECT_THROW(o.validate_for(config), std::invalid_argument);
  o = {};
  o.max_length = 33;  // 32 decoder positions
  EXPECT_NO_THROW(o.validate_for(config));
  o.max_length = 34;
  try {
    o.validate_for(config);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "max_length (34) needs 33 decoder positions; the model has "
              "max_position_embeddings 32");
  }
  o = {};
  o.forced_eos_token_id = 50;
  EXPECT_THROW(o.validate_for(config), std::invalid_argument);
}

TEST(GenerationOptions, MaxNewTokensWinsOverMaxLength) {
  GenerationOptions o;
  o.max_length = 128;
  EXPECT_EQ(o.effective_max_length(), 128);
  o.max_new_tokens = 30;
  EXPECT_EQ(o.effective_max_length(), 31);
  EXPECT_EQ(generate::to_json(o)["max_length"], 31);
}

json pegasus_config() {
  return json{{"model_type", "pegasus"},     {"pad_token_id", 0},        {"eos_token_id", 1}, {"bos_token_id", 0},
              {"decoder_start_token_id", 0}, {"forced_eos_token_id", 1}, {"num_beams", 8},    {"length_penalty", 0.8},
              {"max_length", 128},           {"min_length", 32}};
}

TEST(GenerationOptionsFromHf, ConfigJsonAloneFillsEverything) {
  auto o = generate::generation_options_from_hf(pegasus_config(), json());
  EXPECT_EQ(o.num_beams, 8);
  EXPECT_EQ(o.length_penalty, 0.8);
  EXPECT_EQ(o.max_length, 128);
  EXPECT_EQ(o.min_length, 32);
  EXPECT_EQ(o.forced_eos_token_id, 1);
  EXPECT_EQ(o.eos_token_id, 1);
  EXPECT_EQ(o.decoder_start_token_id, 0);
  EXPECT_EQ(o.no_repeat_ngram_size, 0);
  EXPECT_EQ(o.early_stopping, EarlyStopping::heuristic);
}

TEST(GenerationOptionsFromHf, GenerationConfigJsonWinsAndDefaultsFillTheRest) {
  // HF loads generation_config.json instead of deriving one from config.json: config.json's num_beams and
  // min_length do not leak in; what the file leaves out takes GenerationConfig's defaults.
  json generation{{"num_beams", 4},
                  {"max_length", 64},
                  {"early_stopping", true},
                  {"eos_token_id", 1},
                  {"decoder_start_token_id", 0},
                  {"pad_token_id", 0},
                  {"no_repeat_ngram_size", 3}};
  auto o = generate::generation_options_from_hf(pegasus_config(), generation);
  EXPECT_EQ(o.num_beams, 4);
  EXPECT_EQ(o.max_length, 64);
  EXPECT_EQ(o.min_length, 0);
  EXPECT_EQ(o.length_penalty, 1.0);
  EXPECT_EQ(o.early_stopping, EarlyStopping::on_full);
  EXPECT_EQ(o.no_repeat_ngram_size, 3);
  EXPECT_EQ(o.forced_eos_token_id, -1);
  // Explicit options win over both: the caller sets them on the result.
  o.num_beams = 2;
  EXPECT_EQ(o.num_beams, 2);
}

TEST(GenerationOptionsFromHf, LegacyFileDerivedFromConfigYieldsToIt) {
  // A generation_config.json written by from_model_config that no longer matches config.json: generate() re-derives
  // the settings from config.json.
  json generation{{"_from_model_config", true}, {"num_beams", 4}, {"eos_token_id", 1}, {"decoder_start_token_id", 0}};
  auto o = generate::generation_options_from_hf(pegasus_config(), generation);
  EXPECT_EQ(o.num_beams, 8);
  EXPECT_EQ(o.min_length, 32);
}

TEST(GenerationOptionsFromHf, TokenFallbacksAndLists) {
  json config{{"eos_token_id", json::array({1, 1})}, {"bos_token_id", 5}};
  EXPECT_THROW(generate::generation_options_from_hf(config, json()), std::invalid_argument);  // two eos ids
  config["eos_token_id"] = json::array({2});
  auto o = generate::generation_options_from_hf(config, json());
  EXPECT_EQ(o.eos_token_id, 2);
  EXPECT_EQ(o.decoder_start_token_id, 5);  // no decoder_start_token_id: bos_token_id
  EXPECT_EQ(o.pad_token_id, 2);            // no pad_token_id: eos
  EXPECT_THROW(generate::generation_options_from_hf(json{{"bos_token_id", 0}}, json()), std::invalid_argument);
  EXPECT_THROW(generate::generation_options_from_hf(json{{"eos_token_id", 1}}, json()), std::invalid_argument);
}

TEST(GenerationOptionsFromHf, EarlyStoppingNeverAndBadValues) {
  auto config = pegasus_config();
  config["early_stopping"] = "never";
  EXPECT_EQ(generate::generation_options_from_hf(config, json()).early_stopping, EarlyStopping::never);
  config["early_stopping"] = "sometimes";
  EXPECT_THROW(generate::generation_options_from_hf(config, json()), std::invalid_argument);
  config = pegasus_config();
  config["num_beams"] = 2.5;
  try {
    generate::generation_options_from_hf(config, json(), "my-model");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "my-model/config.json: field 'num_beams' has value 2.5: expected an integer");
  }
}

TEST(GenerationOptionsFromHf, RefusesWhatWouldChangeTheOutputWithTheFieldsName) {
  // Neutral values (as old config.json files spell out) are fine.
  auto config = pegasus_config();
  config["do_sample"] = false;
  config["top_k"] = 50;
  config["repetition_penalty"] = 1.0;
  config["num_return_sequences"] = 1;
  config["bad_words_ids"] = nullptr;
  EXPECT_NO_THROW(generate::generation_options_from_hf(config, json()));
  for (const auto& [field, value] : {std::pair<const char*, json>{"do_sample", true},
                                     {"repetition_penalty", 1.2},
                                     {"num_beam_groups", 2},
                                     {"num_return_sequences", 3},
                                     {"bad_words_ids", json::array({json::array({5})})},
                                     {"min_new_tokens", 4}}) {
    auto bad = pegasus_config();
    bad[field] = value;
    try {
      generate::generation_options_from_hf(bad, json());
      FAIL() << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + field + "'"), std::string::npos) << e.what();
    }
  }
}

// A model built from a config file is named by that file, not by a folder of that name.
TEST(GenerationOptionsFromHf, MessagesNameTheConfigFileItself) {
  try {
    generate::generation_options_from_hf(json{{"bos_token_id", 0}}, json(), "configs/x/config.json");
    FAIL() << "no eos_token_id was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("configs/x/config.json sets no eos_token_id", 0), 0u) << e.what();
  }
  try {
    generate::generation_options_from_hf(json{{"bos_token_id", 0}}, json(), "models/x");
    FAIL() << "no eos_token_id was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("models/x/config.json sets no eos_token_id", 0), 0u) << e.what();
  }
}

TEST(GenerationOptionsFromHf, ReadsTheBundledPegasusFolder) {
  auto o = generate::generation_options_from_hf(util::read_json_file(source_dir() / "data" / "pegasus" / "config.json"),
                                                util::read_json_file(source_dir() / "data" / "pegasus" / "generation_config.json"));
  EXPECT_EQ(o.num_beams, 8);
  EXPECT_EQ(o.length_penalty, 0.8);
  EXPECT_EQ(o.max_length, 128);
  EXPECT_EQ(o.min_length, 32);
  EXPECT_EQ(o.forced_eos_token_id, 1);
  EXPECT_NO_THROW(o.validate());
}

// ---- Logits processors ----

std::vector<std::int64_t> banned(std::vector<std::int64_t> row, std::int64_t n) {
  return generate::banned_ngram_tokens(row.data(), static_cast<std::int64_t>(row.size()), n);
}

TEST(LogitsProcessors, NoRepeatNGramBansWhatWouldRepeat) {
  using V = std::vector<std::int64_t>;
  // Bigrams of 0 5 6 5: (0,5) (5,6) (6,5); the last token 5 was followed by 6 -> ban 6.
  EXPECT_EQ(banned({0, 5, 6, 5}, 2), V({6}));
  // 5 followed by 6 and by 7 earlier: both banned, in order of occurrence.
  EXPECT_EQ(banned({0, 5, 6, 5, 7, 5}, 2), V({6, 7}));
  // Trigrams: the last two tokens (5, 6) occurred before, followed by 7.
  EXPECT_EQ(banned({0, 5, 6, 7, 5, 6}, 3), V({7}));
  EXPECT_EQ(banned({0, 5, 6, 7, 5, 8}, 3), V());
  // The start token is part of the history: (0, 5) seen, the row ends in 0 -> ban 5.
  EXPECT_EQ(banned({0, 5, 0}, 2), V({5}));
  // Too short for the next token to complete a 3-gram: cur_len + 1 < n.
  EXPECT_EQ(banned({0}, 3), V());
  EXPECT_EQ(banned({0, 0}, 3), V());
  EXPECT_EQ(banned({0, 0, 0}, 3), V({0}));
  EXPECT_EQ(banned({4}, 1), V({4}));  // unigrams: every token seen
}

TEST(LogitsProcessors, BanMinLengthAndForcedEosInPlace) {
  const float inf = std::numeric_limits<float>::infinity();
  auto scores = torch::zeros({2, 6});
  auto sequences = torch::tensor({{0, 3, 4, 3}, {0, 2, 2, 2}}, torch::kLong);
  generate::ban_repeated_ngrams(scores, sequences, 2);
  EXPECT_EQ(scores[0][4].item<float>(), -inf);
  EXPECT_EQ(scores[1][2].item<float>(), -inf);
  EXPECT_EQ((scores == -inf).sum().item<std::int64_t>(), 2);

  scores = torch::zeros({2, 6});
  generate::apply_min_length(scores, 4, 5, 1);
  EXPECT_EQ(scores.select(1, 1).eq(-inf).all().item<bool>(), true);
  scores = torch::zeros({2, 6});
  generate::apply_min_length(scores, 5, 5, 1);
  EXPECT_EQ((scores == -inf).sum().item<std::int64_t>(), 0);

  scores = torch::randn({2, 6});
  generate::apply_forced_eos(scores, 8, 10, 1);
  EXPECT_EQ((scores == -inf).sum().item<std::int64_t>(), 0);
  generate::apply_forced_eos(scores, 9, 10, 1);
  EXPECT_EQ((scores == -inf).sum().item<std::int64_t>(), 10);
  EXPECT_EQ(scores.select(1, 1).eq(0).all().item<bool>(), true);
  scores = torch::randn({2, 6});
  generate::apply_forced_eos(scores, 9, 10, -1);  // none configured
  EXPECT_EQ((scores == -inf).sum().item<std::int64_t>(), 0);
}

// ---- Beam hypotheses ----

TEST(BeamHypotheses, KeepsTheBestAndTracksTheWorst) {
  generate::BeamHypotheses h(2, 1.0, EarlyStopping::heuristic, 20);
  EXPECT_EQ(h.worst_score(), 1e9);
  h.add({0, 5}, -2.0, 2);  // score -1
  EXPECT_EQ(h.worst_score(), -1.0);
  h.add({0, 5, 6, 7}, -2.0, 4);  // -0.5
  EXPECT_EQ(h.size(), 2u);
  EXPECT_EQ(h.worst_score(), -1.0);
  h.add({0, 9}, -4.0, 2);  // -2: worse than the worst with the list full, not kept
  EXPECT_EQ(h.size(), 2u);
  h.add({0, 9, 9, 9, 9}, -1.0, 5);  // -0.2 replaces -1
  EXPECT_EQ(h.size(), 2u);
  EXPECT_EQ(h.worst_score(), -0.5);
  EXPECT_EQ(h.best().tokens, std::vector<std::int64_t>({0, 9, 9, 9, 9}));
  EXPECT_DOUBLE_EQ(h.best().score, -0.2);
}

TEST(BeamHypotheses, LengthPenaltyDividesByLengthToThePower) {
  generate::BeamHypotheses h(1, 0.8, EarlyStopping::heuristic, 20);
  h.add({0, 5, 6}, -3.0, 3);
  EXPECT_DOUBLE_EQ(h.best().score, -3.0 / std::pow(3.0, 0.8));
}

TEST(BeamHypotheses, TiesGoToTheLastAdded) {
  generate::BeamHypotheses h(3, 1.0, EarlyStopping::heuristic, 20);
  h.add({0, 1}, -1.0, 2);
  h.add({0, 2}, -1.0, 2);
  EXPECT_EQ(h.best().tokens, std::vector<std::int64_t>({0, 2}));
}

TEST(BeamHypotheses, IsDoneForEachEarlyStopping) {
  for (auto mode : {EarlyStopping::heuristic, EarlyStopping::on_full, EarlyStopping::never}) {
    generate::BeamHypotheses h(2, 1.0, mode, 20);
    h.add({0, 5}, -2.0, 2);  // -1
    EXPECT_FALSE(h.is_done(-0.1, 3)) << "fewer than num_beams finished";
    h.add({0, 6}, -2.0, 2);  // -1, worst -1
    if (mode == EarlyStopping::on_full) {
      EXPECT_TRUE(h.is_done(-0.1, 3));
    } else if (mode == EarlyStopping::heuristic) {
      EXPECT_FALSE(h.is_done(-2.9, 3));  // -2.9 / 3 = -0.97 could still beat -1
      EXPECT_TRUE(h.is_done(-3.0, 3));   // -1 >= -1
    } else {
      EXPECT_FALSE(h.is_done(-3.0, 3));  // "never" divides by max_length: -3 / 20 = -0.15 could still win
      EXPECT_TRUE(h.is_done(-20.0, 3));
    }
  }
  // "never" with length_penalty <= 0 divides by the current length.
  generate::BeamHypotheses h(1, -1.0, EarlyStopping::never, 20);
  h.add({0, 5}, -1.0, 2);            // -1 / 2^-1 = -2
  EXPECT_TRUE(h.is_done(-0.5, 4));   // -0.5 * 4 = -2
  EXPECT_FALSE(h.is_done(-0.4, 4));  // -1.6
}

TEST(BeamHypotheses, ScoresByTheLengthItIsGiven) {
  // HF's generated_len: the caller decides which length counts (GenerationOptions::beam_length).
  generate::BeamHypotheses h(2, 1.0, EarlyStopping::heuristic, 19);
  h.add({0, 5, 6, 7}, -3.0, 3);  // an open beam at max_length under BeamLength::generated: 4 tokens count 3
  EXPECT_DOUBLE_EQ(h.best().score, -1.0);
}

}  // namespace
}  // namespace fitsum::test
