// train::fit_lengths_to_model and check_generation_for_model: the one check of the data's and the decoding's lengths
// against a model that `fitsum train`, `fitsum eval` and `fitsum summarize` share, with their warnings word for word.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "fitsum/tokenizer/bart_tokenizer.h"
#include "fitsum/train/model_lengths.h"
#include "test_support.h"

namespace fitsum::train {
namespace {

model::ModelConfig config_of(const std::string& model_type, std::int64_t positions) {
  model::ModelConfig config;
  config.model_type = model_type;
  config.max_position_embeddings = positions;
  return config;
}

TEST(ModelLengths, LengthsAboveThePositionsAreLoweredWithAWarningEachThenTheT5Prefix) {
  data::DataOptions data;
  data.max_source_length = 2048;
  data.max_target_length = 600;
  std::vector<std::string> warnings;
  fit_lengths_to_model(data, config_of("t5", 512), nullptr, [&](const std::string& w) { warnings.push_back(w); });
  EXPECT_EQ(data.max_source_length, 512);
  EXPECT_EQ(data.max_target_length, 512);
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_EQ(warnings[0], "max_source_length 2048 is above the model's max_position_embeddings 512; using 512");
  EXPECT_EQ(warnings[1], "max_target_length 600 is above the model's max_position_embeddings 512; using 512");
  EXPECT_EQ(warnings[2],
            "this is a T5 model and no --source_prefix is set; T5 expects its task prefix, e.g. --source_prefix "
            "'summarize: '");

  data::DataOptions within;  // 1024 / 128 within a PEGASUS model's 1024 positions: nothing to say
  warnings.clear();
  fit_lengths_to_model(within, config_of("pegasus", 1024), nullptr,
                       [&](const std::string& w) { warnings.push_back(w); });
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(within.max_source_length, 1024);
}

TEST(ModelLengths, TheClampIsWarnedBeforeTheOptionsAreRefused) {
  data::DataOptions data;
  data.max_source_length = 4096;
  data.max_tokens_per_batch = 1000;  // below the clamped 1024: no batch could hold the longest example
  std::vector<std::string> warnings;
  EXPECT_THROW(fit_lengths_to_model(data, config_of("pegasus", 1024), nullptr,
                                    [&](const std::string& w) { warnings.push_back(w); }),
               std::invalid_argument);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rfind("max_source_length 4096 is above", 0), 0u) << warnings[0];
}

TEST(ModelLengths, WithATokenizerTheLengthsMustHoldItsTemplate) {
  const auto bart = tokenizer::BartTokenizer::from_folder(test::source_dir() / "data" / "gpt2");
  data::DataOptions data;
  data.max_source_length = 1;
  const auto ignore = [](const std::string&) {};
  EXPECT_NO_THROW(fit_lengths_to_model(data, config_of("bart", 1024), nullptr, ignore));
  try {
    fit_lengths_to_model(data, config_of("bart", 1024), &bart, ignore);
    FAIL() << "expected max_source_length 1 to be refused for BART's tokenizer";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("max_source_length 1 is below the 2 special tokens BartTokenizer", 0), 0u)
        << e.what();
  }
}

TEST(ModelLengths, GenerationMustFitThePositionsAndItsWarningsComeBack) {
  generate::GenerationOptions generation;
  generation.max_length = 66;  // 65 decoder positions
  EXPECT_THROW(check_generation_for_model(generation, config_of("pegasus", 64)), std::invalid_argument);
  generation.max_length = 10;
  generation.min_length = 12;
  const auto warnings = check_generation_for_model(generation, config_of("pegasus", 64));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rfind("Unfeasible length constraints: min_length (12) is larger than the maximum possible "
                              "length (10).",
                              0),
            0u)
      << warnings[0];
}

}  // namespace
}  // namespace fitsum::train
