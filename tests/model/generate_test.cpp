// Greedy and beam search against outputs of Hugging Face generate() semantics computed elsewhere: the fixtures'
// case.json (greedy, beam, beam_min_length) and tests/data/generation_cases.json (no_repeat_ngram_size,
// early_stopping True / "never", min_length in greedy search, no forced eos; made by transformers' generate() with
// tests/data/make_hf_fixtures.py). Every case runs with and without the key/value cache: the tokens must be
// identical, the beam scores within 1e-4.
#include <gtest/gtest.h>

#include <cmath>

#include "fitsum/generate/beam_search.h"
#include "fitsum/generate/generate.h"
#include "fitsum/generate/greedy_search.h"
#include "fixture_support.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

using generate::EarlyStopping;
using generate::GenerationOptions;
using generate::GenerationResult;

std::filesystem::path fixture_dir(const std::string& name) {
  return name == "tiny-pegasus" ? shared_dir() / "fixtures" / "tiny-pegasus"
                                : source_dir() / "tests" / "data" / "fixtures" / name;
}

// The options HF's generate() would start from for the fixture folder (its config.json: forced eos 1, ...).
GenerationOptions folder_options(const std::string& fixture) {
  return folder_generation_defaults(fixture_dir(fixture));
}

// Generation only reads the weights; HF's padding_idx (reference_embedding = false) changes gradients alone.
model::Seq2SeqLM load_model(const std::string& fixture) { return load_fixture_model(fixture_dir(fixture), false); }

void expect_sequences(const GenerationResult& result, const nlohmann::json& expected, const std::string& what) {
  auto want = long_tensor(expected);
  ASSERT_EQ(result.sequences.sizes(), want.sizes()) << what << ": got " << result.sequences << "\nwant " << want;
  EXPECT_TRUE(torch::equal(result.sequences, want)) << what << ": got\n" << result.sequences << "\nwant\n" << want;
}

void expect_scores(const GenerationResult& result, const nlohmann::json& expected, const std::string& what) {
  ASSERT_TRUE(result.sequence_scores.defined()) << what;
  ASSERT_EQ(result.sequence_scores.size(0), static_cast<std::int64_t>(expected.size())) << what;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(result.sequence_scores[i].item<double>(), expected[i].get<double>(), 1e-4)
        << what << " sequence_scores[" << i << "]";
  }
}

// ---- The fixtures' own cases, with and without the cache ----

class FixtureGeneration : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  std::string fixture() const { return std::get<0>(GetParam()); }
  bool use_cache() const { return std::get<1>(GetParam()); }
  std::string what(const std::string& key) const {
    return fixture() + " " + key + (use_cache() ? " (cached)" : " (uncached)");
  }
};

TEST_P(FixtureGeneration, GreedyMatchesReference) {
  FITSUM_REQUIRE_SHARED();
  const auto c = util::read_json_file(fixture_dir(fixture()) / "case.json");
  const auto& g = c["greedy"];
  auto model = load_model(fixture());
  auto options = folder_options(fixture());
  options.num_beams = 1;
  options.max_length = g["max_length"].get<std::int64_t>();
  options.use_cache = use_cache();
  ASSERT_EQ(options.forced_eos_token_id, 1) << "the fixture's config.json sets forced_eos_token_id";
  auto result = generate::generate(*model, long_tensor(g["input_ids"]), long_tensor(g["attention_mask"]), options);
  expect_sequences(result, g["sequences"], what("greedy"));
  EXPECT_FALSE(result.sequence_scores.defined());
}

TEST_P(FixtureGeneration, BeamSearchMatchesReference) {
  FITSUM_REQUIRE_SHARED();
  const auto c = util::read_json_file(fixture_dir(fixture()) / "case.json");
  auto model = load_model(fixture());
  for (const char* key : {"beam", "beam_min_length"}) {
    const auto& e = c[key];
    auto options = folder_options(fixture());
    options.num_beams = e["num_beams"].get<std::int64_t>();
    options.max_length = e["max_length"].get<std::int64_t>();
    options.length_penalty = e["length_penalty"].get<double>();
    options.min_length = e["min_length"].get<std::int64_t>();
    options.early_stopping = EarlyStopping::heuristic;
    // ../shared's case.json was made with transformers < 4.36's normalisation; every hypothesis ends in the forced
    // eos here, which both conventions count alike.
    options.beam_length = generate::BeamLength::classic;
    options.use_cache = use_cache();
    auto result = generate::generate(*model, long_tensor(c["greedy"]["input_ids"]),
                                     long_tensor(c["greedy"]["attention_mask"]), options);
    expect_sequences(result, e["sequences"], what(key));
    expect_scores(result, e["sequence_scores"], what(key));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureGeneration,
                         ::testing::Combine(::testing::Values("tiny-pegasus", "odd-pegasus"),
                                            ::testing::Values(true, false)),
                         [](const auto& info) {
                           auto name = std::get<0>(info.param) + (std::get<1>(info.param) ? "_cached" : "_uncached");
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// ---- tests/data/generation_cases.json ----

GenerationOptions case_options(const nlohmann::json& c) {
  auto options = folder_options(c["fixture"].get<std::string>());
  const auto& o = c["options"];
  options.num_beams = o["num_beams"].get<std::int64_t>();
  options.max_length = o["max_length"].get<std::int64_t>();
  options.min_length = o["min_length"].get<std::int64_t>();
  options.length_penalty = o["length_penalty"].get<double>();
  options.no_repeat_ngram_size = o["no_repeat_ngram_size"].get<std::int64_t>();
  const auto& early = o["early_stopping"];
  options.early_stopping = early.is_string()   ? EarlyStopping::never
                           : early.get<bool>() ? EarlyStopping::on_full
                                               : EarlyStopping::heuristic;
  options.forced_eos_token_id = o["forced_eos_token_id"].is_null() ? -1 : o["forced_eos_token_id"].get<std::int64_t>();
  return options;  // the file comes from transformers 4.47 (tests/data/make_hf_fixtures.py): BeamLength::generated
}

class GenerationCases : public ::testing::TestWithParam<bool> {};

TEST_P(GenerationCases, MatchReference) {
  FITSUM_REQUIRE_SHARED();
  const auto file = util::read_json_file(source_dir() / "tests" / "data" / "generation_cases.json");
  ASSERT_GE(file["cases"].size(), 10u);
  std::map<std::string, model::Seq2SeqLM> models;
  for (const auto& c : file["cases"]) {
    const auto name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    const auto fixture = c["fixture"].get<std::string>();
    if (!models.count(fixture)) models.emplace(fixture, load_model(fixture));
    auto options = case_options(c);
    options.use_cache = GetParam();
    auto result =
        generate::generate(*models.at(fixture), long_tensor(c["input_ids"]), long_tensor(c["attention_mask"]), options);
    expect_sequences(result, c["sequences"], name);
    if (c.contains("sequence_scores")) {
      expect_scores(result, c["sequence_scores"], name);
    }
  }
}

// transformers < 4.36 divided a beam still open at max_length by all its tokens, 4.37 on by one less
// (GenerationOptions::beam_length): the same sequences, those hypotheses' scores scaled by ((L - 1) /
// L)^length_penalty.
TEST(GenerationCases, ClassicLengthNormalisationOfOpenBeams) {
  FITSUM_REQUIRE_SHARED();
  const auto file = util::read_json_file(source_dir() / "tests" / "data" / "generation_cases.json");
  for (const auto& c : file["cases"]) {
    if (c["name"] != "beam_open_at_max_length") continue;
    auto model = load_model(c["fixture"].get<std::string>());
    auto options = case_options(c);
    options.beam_length = generate::BeamLength::classic;
    auto result = generate::generate(*model, long_tensor(c["input_ids"]), long_tensor(c["attention_mask"]), options);
    expect_sequences(result, c["sequences"], "classic");
    int open = 0;
    for (std::size_t i = 0; i < c["sequences"].size(); ++i) {
      const auto& tokens = c["sequences"][i];
      const auto length = static_cast<double>(tokens.size());
      const bool ended_by_eos = tokens.back().get<std::int64_t>() == options.eos_token_id;
      open += ended_by_eos ? 0 : 1;
      const double scale = ended_by_eos ? 1.0 : std::pow((length - 1.0) / length, options.length_penalty);
      EXPECT_CLOSE(result.sequence_scores[i].item<double>(), c["sequence_scores"][i].get<double>() * scale,
                   relative(1e-5))
          << "sequence " << i;
    }
    EXPECT_GT(open, 0) << "the case no longer has beams open at max_length";
    return;
  }
  FAIL() << "generation_cases.json has no case beam_open_at_max_length";
}

INSTANTIATE_TEST_SUITE_P(Cache, GenerationCases, ::testing::Values(true, false),
                         [](const auto& info) { return std::string(info.param ? "cached" : "uncached"); });

// ---- Finished sequences cost nothing ----

// Greedy: a row is decoded until it produces its eos and never after, so the rows decoded over all steps are the
// generated tokens of all rows.
TEST(GenerationWork, GreedyDropsFinishedRows) {
  FITSUM_REQUIRE_SHARED();
  const auto c = util::read_json_file(fixture_dir("tiny-pegasus") / "case.json");
  auto model = load_model("tiny-pegasus");
  auto options = folder_options("tiny-pegasus");
  options.num_beams = 1;
  options.max_length = 16;
  auto result = generate::generate(*model, long_tensor(c["greedy"]["input_ids"]),
                                   long_tensor(c["greedy"]["attention_mask"]), options);
  std::int64_t generated = 0;
  for (std::int64_t b = 0; b < result.sequences.size(0); ++b) {
    std::int64_t t = 1;
    while (t < result.sequences.size(1) && result.sequences[b][t].item<std::int64_t>() != options.eos_token_id) ++t;
    generated += std::min<std::int64_t>(t, result.sequences.size(1) - 1);  // tokens up to and including the eos
  }
  EXPECT_EQ(result.stats.decoder_steps, result.sequences.size(1) - 1);
  EXPECT_EQ(result.stats.decoded_rows, generated);
  EXPECT_LT(result.stats.decoded_rows, result.sequences.size(0) * result.stats.decoder_steps)
      << "the fixture's rows end at different lengths; finished ones must leave the batch";
}

// Beam search: the first step decodes one row per source; later steps num_beams rows per source still searching.
// The fixture's sources finish at different steps, so fewer rows are decoded than num_beams x sources x steps.
TEST(GenerationWork, BeamSearchDropsFinishedSources) {
  FITSUM_REQUIRE_SHARED();
  const auto c = util::read_json_file(fixture_dir("tiny-pegasus") / "case.json");
  auto model = load_model("tiny-pegasus");
  auto options = folder_options("tiny-pegasus");
  options.num_beams = 4;
  options.max_length = 16;
  options.length_penalty = 0.8;
  auto ids = long_tensor(c["greedy"]["input_ids"]);
  auto result = generate::generate(*model, ids, long_tensor(c["greedy"]["attention_mask"]), options);
  const auto batch = ids.size(0);
  const auto later_steps = result.stats.decoder_steps - 1;
  EXPECT_EQ((result.stats.decoded_rows - batch) % options.num_beams, 0);
  EXPECT_LT(result.stats.decoded_rows, batch + batch * options.num_beams * later_steps);
  EXPECT_GE(result.stats.decoded_rows, batch + options.num_beams * later_steps)
      << "one source at least runs to the end";
}

// ---- Behaviour around the search ----

TEST(Generation, RestoresTrainingModeAndNeedsNoGradient) {
  FITSUM_REQUIRE_SHARED();
  const auto c = util::read_json_file(fixture_dir("tiny-pegasus") / "case.json");
  auto model = load_model("tiny-pegasus");
  model->train();
  auto options = folder_options("tiny-pegasus");
  options.num_beams = 2;
  options.max_length = 8;
  auto result = generate::generate(*model, long_tensor(c["greedy"]["input_ids"]),
                                   long_tensor(c["greedy"]["attention_mask"]), options);
  EXPECT_TRUE(model->is_training());
  EXPECT_FALSE(result.sequence_scores.requires_grad());
  model->eval();
  generate::generate(*model, long_tensor(c["greedy"]["input_ids"]), long_tensor(c["greedy"]["attention_mask"]),
                     options);
  EXPECT_FALSE(model->is_training());
}

TEST(Generation, MaxNewTokensCountsFromTheStartToken) {
  FITSUM_REQUIRE_SHARED();
  const auto c = util::read_json_file(fixture_dir("tiny-pegasus") / "case.json");
  auto model = load_model("tiny-pegasus");
  auto options = folder_options("tiny-pegasus");
  options.num_beams = 1;
  options.max_length = 100;  // max_new_tokens wins
  options.max_new_tokens = 4;
  auto result = generate::generate(*model, long_tensor(c["greedy"]["input_ids"]),
                                   long_tensor(c["greedy"]["attention_mask"]), options);
  ASSERT_EQ(result.sequences.size(1), 5);
  // Forced eos at max_length - 1 = 4; otherwise the copy model's first three tokens.
  auto expected = long_tensor(c["greedy"]["sequences"]).narrow(1, 0, 5).clone();
  expected.select(1, 4).fill_(1);
  EXPECT_TRUE(torch::equal(result.sequences, expected)) << result.sequences;
}

// generate() with min_length above max_length warns and bans eos at every step (MinLengthLogitsProcessor), so every
// sequence runs to max_length, where the forced eos still ends it: the same sequences as min_length = max_length.
TEST(Generation, MinLengthAboveMaxLengthRunsEverySequenceToMaxLength) {
  FITSUM_REQUIRE_SHARED();
  auto model = load_model("tiny-pegasus");
  auto ids = torch::tensor({{120, 130, 140, 1}, {150, 1, 0, 0}}, torch::kLong);
  auto mask = (ids != 0).to(torch::kLong);
  for (const std::int64_t beams : {1, 3}) {
    auto options = folder_options("tiny-pegasus");
    options.num_beams = beams;
    options.max_length = 9;
    options.min_length = 9;
    const auto reachable = generate::generate(*model, ids, mask, options);
    options.min_length = 40;
    ASSERT_EQ(options.warnings().size(), 1u);
    const auto unreachable = generate::generate(*model, ids, mask, options);
    EXPECT_TRUE(torch::equal(unreachable.sequences, reachable.sequences)) << "num_beams " << beams;
    ASSERT_EQ(unreachable.sequences.size(1), 9) << "num_beams " << beams;
    for (std::int64_t row = 0; row < 2; ++row) {
      EXPECT_EQ(unreachable.sequences[row][8].item<std::int64_t>(), 1);  // the forced eos, last
      for (std::int64_t t = 1; t < 8; ++t) EXPECT_NE(unreachable.sequences[row][t].item<std::int64_t>(), 1);
    }
  }
}

TEST(Generation, RefusesBadInputsAndMismatchedStrategies) {
  FITSUM_REQUIRE_SHARED();
  auto model = load_model("tiny-pegasus");
  auto options = folder_options("tiny-pegasus");
  options.num_beams = 1;
  auto ids = torch::tensor({{120, 130, 1}}, torch::kLong);
  auto mask = torch::ones_like(ids);
  EXPECT_THROW(generate::generate(*model, ids.view({-1}), mask.view({-1}), options), std::invalid_argument);
  EXPECT_THROW(generate::generate(*model, ids, mask.narrow(1, 0, 2), options), std::invalid_argument);
  EXPECT_THROW(generate::generate(*model, ids.to(torch::kFloat), mask, options), std::invalid_argument);
  options.num_beams = 4;
  EXPECT_THROW(generate::greedy_search(*model, ids, mask, options), std::invalid_argument);
  options.num_beams = 1;
  EXPECT_THROW(generate::beam_search(*model, ids, mask, options), std::invalid_argument);
  options.num_beams = 100;  // 2 * 100 candidates > 167 tokens
  try {
    generate::generate(*model, ids, mask, options);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("num_beams (100)"), std::string::npos) << e.what();
  }
  options.num_beams = 2;
  options.eos_token_id = 500;
  EXPECT_THROW(generate::generate(*model, ids, mask, options), std::invalid_argument);
}

}  // namespace
}  // namespace fitsum::test
