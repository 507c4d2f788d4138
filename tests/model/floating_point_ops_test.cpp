// HF's total_flos arithmetic: PreTrainedModel.num_parameters(exclude_embeddings=True) on fitsum's modules, against
// the counts transformers reports for the same config.json (tests/data/family_param_counts.json), and the 6 x
// tokens x parameters product.
#include <gtest/gtest.h>

#include "fitsum/io/hf_config.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/train/floating_point_ops.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

std::int64_t non_embedding_parameters_of(const fs::path& folder) {
  const model::Seq2SeqLM model(io::read_model_config(folder));
  return train::non_embedding_parameter_count(*model);
}

// The smallest real config of each family (BART: learned positions and layernorm_embedding; T5: the relative
// attention bias is an nn.Embedding too).
TEST(FloatingPointOps, NonEmbeddingParametersAreHuggingFaces) {
  const auto expected = util::read_json_file(source_dir() / "tests" / "data" / "family_param_counts.json")["models"];
  for (const char* name : {"t5-small", "bart-base"}) {
    EXPECT_EQ(non_embedding_parameters_of(source_dir() / "configs" / name),
              expected[name]["num_parameters_exclude_embeddings"].get<std::int64_t>())
        << name;
  }
}

// PEGASUS's sinusoidal table is a buffer (HF: a frozen nn.Embedding, left out too); T5 v1.1's untied LM head is an
// nn.Linear and counts. Checked against the config's parameter count less the embedding tables.
TEST(FloatingPointOps, TiedAndUntiedHeadsAndSinusoidalPositions) {
  FITSUM_REQUIRE_SHARED();
  // tiny-pegasus: d_model 32, 2 + 2 layers, feed-forward 64 / 48, vocabulary 167.
  const std::int64_t encoder_layer = 4 * (32 * 32 + 32) + 2 * 32 + (32 * 64 + 64) + (64 * 32 + 32) + 2 * 32;
  const std::int64_t decoder_layer = 2 * (4 * (32 * 32 + 32) + 2 * 32) + (32 * 48 + 48) + (48 * 32 + 32) + 2 * 32;
  EXPECT_EQ(non_embedding_parameters_of(shared_dir() / "fixtures" / "tiny-pegasus"),
            2 * encoder_layer + 2 * decoder_layer + 2 * 2 * 32);
  EXPECT_EQ(2 * encoder_layer + 2 * decoder_layer + 2 * 2 * 32, 40800);
  const auto folder = source_dir() / "tests" / "data" / "fixtures" / "tiny-t5-v1_1";
  const auto config = io::read_model_config(folder);
  ASSERT_FALSE(config.tie_word_embeddings);
  const auto embeddings =
      config.vocab_size * config.d_model + 2 * config.relative_attention_num_buckets * config.encoder_attention_heads;
  EXPECT_EQ(non_embedding_parameters_of(folder), model::count_parameters(config).trainable - embeddings);
}

// PEGASUS-X's global-token embedding (embed_global) and LongT5's transient-global relative bias
// (global_relative_attention_bias) are nn.Embedding modules in transformers: left out like the other tables.
TEST(FloatingPointOps, LongDocumentFamiliesLeaveOutTheirEmbeddingsAsHuggingFaceDoes) {
  const auto expected = util::read_json_file(source_dir() / "tests" / "data" / "long_config_counts.json")["models"];
  for (const char* name : {"pegasus-x-base", "long-t5-local-base", "long-t5-tglobal-base"}) {
    EXPECT_EQ(non_embedding_parameters_of(source_dir() / "configs" / name),
              expected[name]["num_parameters_exclude_embeddings"].get<std::int64_t>())
        << name;
  }
}

TEST(FloatingPointOps, SixTimesTokensTimesParameters) {
  EXPECT_EQ(train::floating_point_ops(8 * 12, 40800), 6.0 * 96 * 40800);
  EXPECT_EQ(train::floating_point_ops(0, 40800), 0.0);
}

}  // namespace
}  // namespace fitsum::test
