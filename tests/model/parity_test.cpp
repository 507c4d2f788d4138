// The model against the reference fixtures: loss, logits, encoder states and gradients, within the tolerances of
// ../shared/fixtures/README.md.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "fixture_support.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

struct Case {
  std::string name;
  std::filesystem::path dir;
};

class Parity : public ::testing::TestWithParam<std::string> {
 protected:
  std::filesystem::path dir() const {
    return GetParam() == "tiny-pegasus" ? shared_dir() / "fixtures" / "tiny-pegasus"
                                        : source_dir() / "tests" / "data" / "fixtures" / GetParam();
  }
  std::filesystem::path hf_padding_file() const {
    return source_dir() / "tests" / "data" / "fixtures" / GetParam() / "hf_padding.json";
  }
  // The fixture's model (HF's padding_idx) in eval mode with its case's encoder inputs.
  struct Decoding {
    nlohmann::json c;
    model::Seq2SeqLM model;
    torch::Tensor ids, mask;
  };
  Decoding decoding() const {
    Decoding d{util::read_json_file(dir() / "case.json"), load_fixture_model(dir(), false), {}, {}};
    d.model->eval();
    d.ids = long_tensor(d.c["input_ids"]);
    d.mask = long_tensor(d.c["attention_mask"]);
    return d;
  }
};

TEST_P(Parity, DecoderInputsAreLabelsShiftedRight) {
  FITSUM_REQUIRE_SHARED();
  const auto c = util::read_json_file(dir() / "case.json");
  auto model = load_fixture_model(dir(), true);
  auto shifted = model->shift_tokens_right(long_tensor(c["labels"]));
  EXPECT_TRUE(torch::equal(shifted, long_tensor(c["decoder_input_ids"])));
}

TEST_P(Parity, ForwardMatchesReference) {
  FITSUM_REQUIRE_SHARED();
  const auto c = util::read_json_file(dir() / "case.json");
  auto model = load_fixture_model(dir(), true);
  model->eval();
  torch::NoGradGuard no_grad;
  auto out = model->forward(long_tensor(c["input_ids"]), long_tensor(c["attention_mask"]), long_tensor(c["labels"]));
  const double loss = c["loss"].get<double>();
  EXPECT_CLOSE(out.loss.item<double>(), loss, relative(1e-5));
  const auto shape = c["logits"]["shape"].get<std::vector<std::int64_t>>();
  EXPECT_EQ(out.logits.sizes().vec(), shape);
  expect_samples_near(out.logits, c["logits"], 1e-4, "logits");
  expect_samples_near(out.encoder_hidden_state, c["encoder_last_hidden_state"], 1e-4, "encoder_last_hidden_state");
  // The sum's rounding error grows with the logits' l2 norm (per-entry errors add up), not with the sum, which
  // cancels. Measured: 7e-6 with this CPU's default kernels, 3.5e-4 with OPENBLAS_CORETYPE=Haswell (l2 132).
  const double l2 = c["logits"]["l2"].get<double>();
  EXPECT_CLOSE(out.logits.to(torch::kDouble).sum().item<double>(), c["logits"]["sum"].get<double>(),
               absolute(7.5e-6 * l2));
}

TEST_P(Parity, GradientsMatchReference) {
  FITSUM_REQUIRE_SHARED();
  const auto c = util::read_json_file(dir() / "case.json");
  auto model = load_fixture_model(dir(), true);
  model->train();  // the fixtures have every dropout at 0
  auto out = model->forward(long_tensor(c["input_ids"]), long_tensor(c["attention_mask"]), long_tensor(c["labels"]));
  out.loss.backward();
  expect_gradients_match_case(*model, c);
}

TEST_P(Parity, GradientsWithHuggingFacePaddingIdx) {
  FITSUM_REQUIRE_SHARED();
  const auto c = util::read_json_file(dir() / "case.json");
  const auto hf = util::read_json_file(hf_padding_file());
  auto model = load_fixture_model(dir(), false);
  ASSERT_EQ(model->config().embedding_padding_idx, model->config().pad_token_id);
  auto out = model->forward(long_tensor(c["input_ids"]), long_tensor(c["attention_mask"]), long_tensor(c["labels"]));
  EXPECT_CLOSE(out.loss.item<double>(), hf["loss"].get<double>(), relative(1e-5));
  out.loss.backward();
  auto params = model->named_parameters();
  for (const auto& item : hf["grads"].items()) {
    const auto& grad = params[item.key()].grad();
    expect_samples_near(grad, item.value(), rms_tolerance(item.value(), grad.numel()), "grad of " + item.key());
  }
  double sum_sq = 0.0;
  for (const auto& p : model->parameters()) {
    if (p.grad().defined()) sum_sq += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
  }
  const double expected = hf["grad_global_l2"].get<double>();
  EXPECT_CLOSE(std::sqrt(sum_sq), expected, relative(1e-5));
}

TEST_P(Parity, CachedDecodingEqualsFullDecoding) {
  FITSUM_REQUIRE_SHARED();
  auto [c, model, ids, mask] = decoding();
  torch::NoGradGuard no_grad;
  auto decoder_ids = long_tensor(c["decoder_input_ids"]);
  auto encoded = model->encode(ids, mask);
  auto full = model->lm_logits(model->decode(decoder_ids, encoded, mask));  // (B, T, V)
  auto cache = model->new_cache();
  // First two positions at once, then one at a time.
  std::vector<torch::Tensor> steps;
  steps.push_back(model->lm_logits(model->decode(decoder_ids.narrow(1, 0, 2), encoded, mask, &cache)));
  for (std::int64_t t = 2; t < decoder_ids.size(1); ++t) {
    steps.push_back(model->lm_logits(model->decode(decoder_ids.narrow(1, t, 1), encoded, mask, &cache)));
  }
  auto incremental = torch::cat(steps, 1);
  EXPECT_EQ(cache.length, decoder_ids.size(1));
  // Float32 rounding differs between the two orders of summation: bounded relative to the logits' magnitude
  // (|logits| reaches ~17), well inside the 1e-4 absolute of ../shared/fixtures/README.md.
  EXPECT_CLOSE(incremental, full, relative(4e-6));
}

// Beam search's layout: the beams of a source share one copy of its cross-attention keys/values and mask
// (DecoderCache::expand), their queries meeting them in one product per source. The logits equal those of every beam
// holding its own copy, through beams reordered within their sources and a source dropped; the shared cache holds
// one row per source.
TEST_P(Parity, BeamsShareTheirSourcesCrossAttentionCache) {
  FITSUM_REQUIRE_SHARED();
  auto [c, model, ids, mask] = decoding();
  torch::NoGradGuard no_grad;
  const auto batch = ids.size(0);
  ASSERT_GE(batch, 2);
  const std::int64_t beams = 3;
  auto encoded = model->encode(ids, mask);
  auto copies = model->new_cache();  // the reference: one row of everything per beam
  auto copies_encoded = encoded.repeat_interleave(beams, 0);
  auto copies_mask = mask.repeat_interleave(beams, 0);
  auto shared = model->new_cache();  // one row per source for the first step, then `beams` rows per source
  auto shared_mask = mask;
  auto start = torch::full({batch, 1}, model->config().decoder_start_token_id, torch::kLong);
  auto first = model->lm_logits(model->decode(start, encoded, shared_mask, &shared));
  shared.expand(beams);
  auto first_copies =
      model->lm_logits(model->decode(start.repeat_interleave(beams, 0), copies_encoded, copies_mask, &copies));
  EXPECT_CLOSE(first.repeat_interleave(beams, 0), first_copies, relative(4e-6));
  EXPECT_EQ(shared.cross_attention[0].key.size(0), batch);
  EXPECT_EQ(copies.cross_attention[0].key.size(0), batch * beams);

  torch::manual_seed(0);
  std::int64_t sources = batch;
  for (int step = 0; step < 4; ++step) {
    auto tokens = torch::randint(2, model->config().vocab_size, {sources * beams, 1}, torch::kLong);
    auto got = model->lm_logits(model->decode(tokens, encoded, shared_mask, &shared));
    auto want = model->lm_logits(model->decode(tokens, copies_encoded, copies_mask, &copies));
    EXPECT_CLOSE(got, want, relative(4e-6)) << "step " << step;
    EXPECT_EQ(shared.cross_attention.back().key.size(0), sources) << "step " << step;
    std::vector<std::int64_t> rows;
    if (step == 1) {
      // The first source is done: its beams leave, the others keep their order.
      for (std::int64_t r = beams; r < sources * beams; ++r) rows.push_back(r);
      auto kept = torch::arange(1, sources, torch::kLong);
      auto index = torch::tensor(rows, torch::kLong);
      shared.select(index, kept);
      shared_mask = shared_mask.index_select(0, kept);
      copies.select(index);
      copies_mask = copies_mask.index_select(0, index);
      --sources;
    } else {
      // Beams reordered within their sources: the second beam first, then the first twice.
      for (std::int64_t s = 0; s < sources; ++s) {
        for (std::int64_t b = 0; b < beams; ++b)
          rows.push_back(s * beams + std::max<std::int64_t>(beams - 1 - b, 1) - 1);
      }
      auto index = torch::tensor(rows, torch::kLong);
      shared.select(index);
      copies.select(index);
      copies_mask = copies_mask.index_select(0, index);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity, ::testing::Values("tiny-pegasus", "odd-pegasus"));

}  // namespace
}  // namespace fitsum::test
