// The BART, T5, PEGASUS-X and LongT5 families against values computed by Hugging Face transformers itself
// (tests/data/fixtures/tiny-bart, tiny-t5 (v1.0: relu, tied head rescaled by d_model^-0.5), tiny-t5-v1_1 (gated-gelu,
// untied head), tiny-pegasus-x (blocks of 4 staggered in layer 1, 3 global tokens), tiny-longt5-local and
// tiny-longt5-tglobal (local_radius 2, global blocks of 4), written by tests/data/make_family_fixtures.py; the sources
// of the long-input fixtures end inside a block): loss, logits, encoder states and gradients (BART with HF's
// embedding semantics, padding_idx = pad; T5's embedding has none), and generate() with explicit options and with the
// checkpoint's own defaults (BART's forced_bos_token_id, no_repeat_ngram_size 3, min_length, length_penalty 2.0,
// num_beams 4), cached and not.
// Tolerances are those of ../shared/fixtures/README.md.
#include <algorithm>

#include <gtest/gtest.h>

#include "fitsum/generate/generate.h"
#include "fitsum/generate/options.h"
#include "fitsum/io/checkpoint.h"
#include "fitsum/io/hf_config.h"
#include "fitsum/io/safetensors.h"
#include "fitsum/optim/sharding.h"
#include "fixture_support.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

class FamilyParity : public ::testing::TestWithParam<std::string> {
 protected:
  std::filesystem::path dir() const { return source_dir() / "tests" / "data" / "fixtures" / GetParam(); }
  nlohmann::json read_case() const { return util::read_json_file(dir() / "case.json"); }
};

TEST_P(FamilyParity, ConfigHasTheFamilysLayout) {
  auto model = load_fixture_model(dir(), false);
  const auto& config = model->config();
  if (GetParam() == "tiny-bart") {
    EXPECT_EQ(config.model_type, "bart");
    EXPECT_FALSE(config.normalize_before);
    EXPECT_TRUE(config.layernorm_embedding);
    EXPECT_FALSE(config.final_layer_norm);
    EXPECT_EQ(config.position_embedding, model::PositionEmbedding::learned);
    EXPECT_EQ(config.decoder_start_token_id, 2);
    EXPECT_EQ(config.embedding_padding_idx, config.pad_token_id);
  } else if (GetParam() == "tiny-pegasus-x") {
    EXPECT_EQ(config.model_type, "pegasus_x");
    EXPECT_EQ(config.encoder_attention, model::EncoderAttention::global_local);
    EXPECT_EQ(config.block_size, 4);
    EXPECT_EQ(config.num_global_tokens, 3);
    EXPECT_TRUE(config.stagger_local_blocks);
    EXPECT_EQ(config.position_embedding, model::PositionEmbedding::computed);
    EXPECT_FALSE(config.attention_bias);
    EXPECT_FALSE(model->final_logits_bias.defined());
    const auto names = model->named_parameters();
    EXPECT_TRUE(names.contains("model.encoder.embed_global.weight"));
    EXPECT_TRUE(names.contains("model.encoder.layers.1.global_self_attn_layer_norm.weight"));
  } else if (GetParam().rfind("tiny-longt5", 0) == 0) {
    const bool tglobal = GetParam() == "tiny-longt5-tglobal";
    EXPECT_EQ(config.model_type, "longt5");
    EXPECT_EQ(config.encoder_attention,
              tglobal ? model::EncoderAttention::transient_global : model::EncoderAttention::local);
    EXPECT_EQ(config.local_radius, 2);
    EXPECT_EQ(config.global_block_size, 4);
    EXPECT_TRUE(config.gated_ffn);
    EXPECT_FALSE(config.tie_word_embeddings);
    const auto names = model->named_parameters();
    EXPECT_EQ(names.contains("encoder.block.0.layer.0.TransientGlobalSelfAttention.global_input_layer_norm.weight"),
              tglobal);
    EXPECT_EQ(names.contains("encoder.block.0.layer.0.LocalSelfAttention.relative_attention_bias.weight"), !tglobal);
  } else {
    EXPECT_EQ(config.model_type, "t5");
    EXPECT_EQ(config.module_layout, model::ModuleLayout::blocks);
    EXPECT_FALSE(model->final_logits_bias.defined());
    const auto names = model->named_parameters();
    EXPECT_TRUE(names.contains("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"));
    EXPECT_TRUE(names.contains("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"));
    EXPECT_FALSE(names.contains("encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"));
    EXPECT_TRUE(names.contains("decoder.block.0.layer.1.EncDecAttention.q.weight"));
    EXPECT_TRUE(names.contains("decoder.final_layer_norm.weight"));
  }
  std::int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  EXPECT_EQ(parameters, read_case()["trainable_parameters"].get<std::int64_t>());
}

TEST_P(FamilyParity, DecoderInputsAreLabelsShiftedRight) {
  const auto c = read_case();
  auto model = load_fixture_model(dir(), false);
  EXPECT_TRUE(torch::equal(model->shift_tokens_right(long_tensor(c["labels"])), long_tensor(c["decoder_input_ids"])));
}

TEST_P(FamilyParity, ForwardMatchesTransformers) {
  const auto c = read_case();
  auto model = load_fixture_model(dir(), false);
  model->eval();
  torch::NoGradGuard no_grad;
  auto out = model->forward(long_tensor(c["input_ids"]), long_tensor(c["attention_mask"]), long_tensor(c["labels"]));
  EXPECT_CLOSE(out.loss.item<double>(), c["loss"].get<double>(), relative(1e-5));
  EXPECT_EQ(out.logits.sizes().vec(), c["logits"]["shape"].get<std::vector<std::int64_t>>());
  expect_samples_near(out.logits, c["logits"], 1e-4, "logits");
  expect_samples_near(out.encoder_hidden_state, c["encoder_last_hidden_state"], 1e-4, "encoder_last_hidden_state");
}

TEST_P(FamilyParity, GradientsMatchTransformers) {
  const auto c = read_case();
  auto model = load_fixture_model(dir(), false);
  model->train();  // every dropout of the fixture is 0
  auto out = model->forward(long_tensor(c["input_ids"]), long_tensor(c["attention_mask"]), long_tensor(c["labels"]));
  out.loss.backward();
  expect_gradients_match_case(*model, c);
}

// Options as the fixture's case passed them to generate(), on top of the checkpoint's own defaults.
generate::GenerationOptions options_for(const std::filesystem::path& dir, const nlohmann::json& g) {
  auto options = folder_generation_defaults(dir);
  // The BART and T5 fixtures come from transformers 4.35.2, whose beam search divides by the classic length
  // (docs/generate.md); it matters for beams still open at max_length (tiny-t5's beam cases). The PEGASUS-X and
  // LongT5 ones come from 4.47.1, which divides by the generated length, fitsum's default.
  const auto version = util::read_json_file(dir / "case.json")["versions"]["transformers"].get<std::string>();
  if (version.rfind("4.35.", 0) == 0) options.beam_length = generate::BeamLength::classic;
  if (g.contains("num_beams")) options.num_beams = g["num_beams"].get<std::int64_t>();
  if (g.contains("max_length")) options.max_length = g["max_length"].get<std::int64_t>();
  if (g.contains("length_penalty")) options.length_penalty = g["length_penalty"].get<double>();
  if (g.contains("min_length")) options.min_length = g["min_length"].get<std::int64_t>();
  if (g.contains("no_repeat_ngram_size")) options.no_repeat_ngram_size = g["no_repeat_ngram_size"].get<std::int64_t>();
  if (g.contains("early_stopping")) {
    options.early_stopping =
        g["early_stopping"].get<bool>() ? generate::EarlyStopping::on_full : generate::EarlyStopping::heuristic;
  }
  if (g.contains("forced_bos_token_id")) {
    options.forced_bos_token_id =
        g["forced_bos_token_id"].is_null() ? -1 : g["forced_bos_token_id"].get<std::int64_t>();
  }
  return options;
}

TEST_P(FamilyParity, GenerationMatchesTransformers) {
  const auto c = read_case();
  const auto& g = c["generate"];
  auto model = load_fixture_model(dir(), false);
  const auto ids = long_tensor(g["input_ids"]);
  const auto mask = long_tensor(g["attention_mask"]);
  for (const char* name : {"greedy", "beam", "beam_min_length", "greedy_no_repeat_ngram", "defaults"}) {
    for (const bool use_cache : {true, false}) {
      auto options = options_for(dir(), g[name]);
      options.use_cache = use_cache;
      const auto result = generate::generate(*model, ids, mask, options);
      EXPECT_TRUE(torch::equal(result.sequences, long_tensor(g[name]["sequences"])))
          << name << (use_cache ? " (cache)" : " (no cache)") << "\n got " << result.sequences;
      if (g[name].contains("sequence_scores")) {
        const auto want = torch::tensor(g[name]["sequence_scores"].get<std::vector<double>>(), torch::kDouble);
        EXPECT_CLOSE(result.sequence_scores.to(torch::kDouble), want, absolute(1e-4)) << name;
      }
    }
  }
}

TEST_P(FamilyParity, CheckpointDefaultsAreTheFamilysGenerationSettings) {
  const auto c = read_case();
  const auto& expected = c["generate"]["defaults_config"];
  const auto options = folder_generation_defaults(dir());
  EXPECT_EQ(options.num_beams, expected["num_beams"].get<std::int64_t>());
  EXPECT_EQ(options.no_repeat_ngram_size, expected["no_repeat_ngram_size"].get<std::int64_t>());
  EXPECT_EQ(options.min_length, expected["min_length"].get<std::int64_t>());
  EXPECT_EQ(options.length_penalty, expected["length_penalty"].get<double>());
  const auto id_or_none = [&](const char* key) {
    return expected[key].is_null() ? std::int64_t{-1} : expected[key].get<std::int64_t>();
  };
  EXPECT_EQ(options.forced_bos_token_id, id_or_none("forced_bos_token_id"));
  EXPECT_EQ(options.forced_eos_token_id, id_or_none("forced_eos_token_id"));
  EXPECT_EQ(options.decoder_start_token_id, expected["decoder_start_token_id"].get<std::int64_t>());
  EXPECT_EQ(options.early_stopping, expected["early_stopping"].get<bool>() ? generate::EarlyStopping::on_full
                                                                           : generate::EarlyStopping::heuristic);
}

INSTANTIATE_TEST_SUITE_P(Bart, FamilyParity, ::testing::Values("tiny-bart"));
INSTANTIATE_TEST_SUITE_P(T5, FamilyParity, ::testing::Values("tiny-t5", "tiny-t5-v1_1"));
INSTANTIATE_TEST_SUITE_P(PegasusX, FamilyParity, ::testing::Values("tiny-pegasus-x"));
INSTANTIATE_TEST_SUITE_P(LongT5, FamilyParity, ::testing::Values("tiny-longt5-local", "tiny-longt5-tglobal"));

// T5's config.json as transformers saved it: the switches of every T5, and the parameter count of the model
// transformers built from it, counted from the config and in the model built from it.
TEST(FamilyConfig, T5ConfigsReadAsTransformersBuildsThem) {
  for (const std::string name : {"tiny-t5", "tiny-t5-v1_1"}) {
    const auto dir = source_dir() / "tests" / "data" / "fixtures" / name;
    const auto c = io::read_model_config(dir);
    const bool v1_1 = name == "tiny-t5-v1_1";
    EXPECT_EQ(c.model_type, "t5");
    EXPECT_EQ(c.module_layout, model::ModuleLayout::blocks);
    EXPECT_EQ(c.position_embedding, model::PositionEmbedding::relative);
    EXPECT_EQ(c.normalization, model::Normalization::rms_norm);
    EXPECT_FALSE(c.linear_bias);
    EXPECT_FALSE(c.scale_attention_scores);
    EXPECT_FALSE(c.has_final_logits_bias);
    EXPECT_EQ(c.encoder_head_dim(), 6);  // d_kv, not d_model / heads = 8
    EXPECT_EQ(c.encoder_layers, 2);
    EXPECT_EQ(c.decoder_layers, 3);
    EXPECT_EQ(c.relative_attention_num_buckets, 8);
    EXPECT_EQ(c.relative_attention_max_distance, 20);
    EXPECT_EQ(c.layer_norm_eps, 1e-6);
    EXPECT_EQ(c.decoder_start_token_id, 0);
    EXPECT_EQ(c.embedding_padding_idx, -1);
    EXPECT_EQ(c.gated_ffn, v1_1);
    EXPECT_EQ(c.activation_function, v1_1 ? model::Activation::gelu_new : model::Activation::relu);
    EXPECT_EQ(c.tie_word_embeddings, !v1_1);
    EXPECT_EQ(c.scale_decoder_outputs, !v1_1);
    const auto expected = util::read_json_file(dir / "case.json")["trainable_parameters"].get<std::int64_t>();
    EXPECT_EQ(model::count_parameters(c).trainable, expected) << name;
    EXPECT_EQ(model::count_parameters(c).frozen, 0) << name;
    std::int64_t built = 0;
    for (const auto& p : model::Seq2SeqLM { c } -> parameters()) built += p.numel();
    EXPECT_EQ(built, expected) << name;
  }
}

// transformers 5 saves a T5 v1.1 whose head is tied to model.shared as tie_word_embeddings true with
// scale_decoder_outputs false, and no lm_head.weight: the head is model.shared without the d_model^-0.5 rescale. Built
// from tiny-t5-v1_1 with its head set to its embedding, such a folder gives the same logits, and saving it keeps the
// switch.
TEST(FamilyConfig, TransformersFiveTiedT5V11HeadIsNotRescaled) {
  const auto fixture = source_dir() / "tests" / "data" / "fixtures" / "tiny-t5-v1_1";
  auto untied = load_fixture_model(fixture, false);
  untied->eval();
  torch::NoGradGuard no_grad;
  untied->lm_head->weight.copy_(untied->model->shared->weight);
  const auto dir = temp_dir("t5-v5-tied");
  auto config = util::read_json_file(fixture / "config.json");
  config["tie_word_embeddings"] = true;
  config["scale_decoder_outputs"] = false;
  util::write_file_atomic(dir / "config.json", config.dump(2));
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& [name, tensor] : io::checkpoint_tensors(*untied)) {
    if (name != "lm_head.weight") tensors.emplace_back(name, tensor);
  }
  io::write_safetensors(dir / "model.safetensors", tensors);

  auto tied = load_fixture_model(dir, false);
  tied->eval();
  EXPECT_TRUE(tied->config().tie_word_embeddings);
  EXPECT_FALSE(tied->config().scale_decoder_outputs);
  const auto c = util::read_json_file(fixture / "case.json");
  const auto ids = long_tensor(c["input_ids"]), mask = long_tensor(c["attention_mask"]),
             labels = long_tensor(c["labels"]);
  const auto want = untied->forward(ids, mask, labels).logits;
  EXPECT_TRUE(
      torch::allclose(tied->forward(ids, mask, labels).logits, want, 1e-5, 1e-5 * want.abs().max().item<double>()));

  io::save_model_folder(*tied, dir / "saved");
  const auto saved = io::read_model_config(dir / "saved");
  EXPECT_TRUE(saved.tie_word_embeddings);
  EXPECT_FALSE(saved.scale_decoder_outputs);
  EXPECT_FALSE(io::read_model_config(fixture).scale_decoder_outputs);
  EXPECT_TRUE(io::read_model_config(source_dir() / "tests" / "data" / "fixtures" / "tiny-t5").scale_decoder_outputs);
}

// mT5 is T5 v1.1 under model_type "mt5" (MT5ForConditionalGeneration, the same modules): tiny-t5-v1_1's folder
// relabelled loads, computes the same logits and is saved as an mT5 folder again; fields an mT5 config leaves out get
// MT5Config's defaults (gated-gelu, untied), not T5Config's.
TEST(FamilyConfig, MT5IsT5V11UnderItsOwnName) {
  const auto fixture = source_dir() / "tests" / "data" / "fixtures" / "tiny-t5-v1_1";
  const auto dir = temp_dir("mt5");
  auto config = util::read_json_file(fixture / "config.json");
  config["model_type"] = "mt5";
  config["architectures"] = nlohmann::json::array({"MT5ForConditionalGeneration"});
  config.erase("feed_forward_proj");
  config.erase("dense_act_fn");
  config.erase("is_gated_act");
  config.erase("tie_word_embeddings");
  util::write_file_atomic(dir / "config.json", config.dump(2));
  std::filesystem::copy_file(fixture / "model.safetensors", dir / "model.safetensors");

  auto mt5 = load_fixture_model(dir, false);
  auto t5 = load_fixture_model(fixture, false);
  mt5->eval();
  t5->eval();
  EXPECT_EQ(mt5->config().model_type, "mt5");
  EXPECT_EQ(mt5->config().module_layout, model::ModuleLayout::blocks);
  EXPECT_TRUE(mt5->config().gated_ffn);
  EXPECT_FALSE(mt5->config().tie_word_embeddings);
  torch::NoGradGuard no_grad;
  const auto c = util::read_json_file(fixture / "case.json");
  const auto ids = long_tensor(c["input_ids"]), mask = long_tensor(c["attention_mask"]),
             labels = long_tensor(c["labels"]);
  EXPECT_TRUE(torch::equal(mt5->forward(ids, mask, labels).logits, t5->forward(ids, mask, labels).logits));

  io::save_model_folder(*mt5, dir / "saved");
  const auto saved = util::read_json_file(dir / "saved" / "config.json");
  EXPECT_EQ(saved["model_type"], "mt5");
  EXPECT_EQ(saved["architectures"][0], "MT5ForConditionalGeneration");
  EXPECT_EQ(saved["tie_word_embeddings"], false);

  // transformers 5 writes every mT5 as tied and its MT5 model never rescales the head.
  config["tie_word_embeddings"] = true;
  std::filesystem::create_directories(dir / "tied");
  util::write_file_atomic(dir / "tied" / "config.json", config.dump(2));
  const auto tied = io::read_model_config(dir / "tied");
  EXPECT_TRUE(tied.tie_word_embeddings);
  EXPECT_FALSE(tied.scale_decoder_outputs);
}

TEST(FamilyConfig, BartCountsLikeTransformers) {
  const auto dir = source_dir() / "tests" / "data" / "fixtures" / "tiny-bart";
  const auto c = io::read_model_config(dir);
  EXPECT_EQ(model::count_parameters(c).trainable,
            util::read_json_file(dir / "case.json")["trainable_parameters"].get<std::int64_t>());
  EXPECT_EQ(model::count_parameters(c).frozen, c.vocab_size);  // final_logits_bias
}

// The per-tensor counts the planner partitions for ZeRO stage 1 (optim/sharding.h) are the built model's trainable
// tensors: the same elements and rows + columns, so the planner's largest share is the trainer's.
TEST(FamilyConfig, TrainableTensorsAreTheBuiltModelsParameters) {
  const auto fixtures = source_dir() / "tests" / "data" / "fixtures";
  for (const auto& dir : {fixtures / "tiny-bart", fixtures / "tiny-t5", fixtures / "tiny-t5-v1_1",
                          fixtures / "odd-pegasus", source_dir() / "configs" / "pegasus-tiny",
                          fixtures / "tiny-pegasus-x", fixtures / "tiny-longt5-local",
                          fixtures / "tiny-longt5-tglobal"}) {
    const auto name = dir.string();
    const auto c = io::read_model_config(dir);
    using Pair = std::pair<std::int64_t, std::int64_t>;
    std::vector<Pair> counted, built;
    std::vector<std::int64_t> counted_elements, built_elements;
    for (const auto& t : model::count_parameters(c).trainable_tensors) {
      counted.emplace_back(t.elements, t.rows_plus_cols);
      counted_elements.push_back(t.elements);
    }
    for (const auto& p : model::Seq2SeqLM { c } -> parameters()) {
      if (!p.requires_grad()) continue;
      built.emplace_back(p.numel(), p.dim() >= 2 ? p.size(0) + p.size(1) : 0);
      built_elements.push_back(p.numel());
    }
    std::vector<std::uint64_t> counted_bytes(counted_elements.begin(), counted_elements.end());
    std::vector<std::uint64_t> built_bytes(built_elements.begin(), built_elements.end());
    EXPECT_EQ(optim::largest_share(counted_elements, counted_bytes, 3),
              optim::largest_share(built_elements, built_bytes, 3))
        << name;
    std::sort(counted.begin(), counted.end());
    std::sort(built.begin(), built.end());
    EXPECT_EQ(counted, built) << name;
  }
}

}  // namespace
}  // namespace fitsum::test
