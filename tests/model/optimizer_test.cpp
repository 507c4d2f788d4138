// AdamW and Adafactor against the fixture trajectories (three steps on case.json's batch), the Trainer's
// weight-decay rule, and name-keyed optimizer state that resumes exactly.
#include <gtest/gtest.h>

#include "fitsum/optim/optimizers.h"
#include "fixture_support.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

struct Trajectory {
  std::vector<double> losses;
};

Trajectory run_steps(model::Seq2SeqLM& m, torch::optim::Optimizer& opt, const nlohmann::json& c, int steps) {
  Trajectory t;
  const auto ids = long_tensor(c["input_ids"]);
  const auto mask = long_tensor(c["attention_mask"]);
  const auto labels = long_tensor(c["labels"]);
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    auto out = m->forward(ids, mask, labels);
    t.losses.push_back(out.loss.item<double>());
    out.loss.backward();
    opt.step();
  }
  return t;
}

class OptimizerTrajectory : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimizerTrajectory, MatchesFixture) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = shared_dir() / "fixtures" / "tiny-pegasus";
  const auto c = util::read_json_file(dir / "case.json");
  const auto& expected = c[GetParam()];
  auto m = load_fixture_model(dir, /*reference_embedding=*/true);
  m->train();
  optim::OptimizerSettings settings;
  settings.type = optim::parse_optimizer_type(GetParam() == "adamw" ? "adamw_torch" : "adafactor");
  settings.learning_rate = expected["learning_rate"];
  settings.weight_decay = expected["weight_decay"];
  auto opt = optim::make_optimizer(*m, settings);
  const auto t = run_steps(m, *opt, c, 3);
  const auto& losses = expected["losses_before_each_step"];
  for (std::size_t i = 0; i < 3; ++i) {
    const double want = losses[i].get<double>();
    EXPECT_CLOSE(t.losses[i], want, relative(i == 0 ? 1e-5 : 1e-4)) << "loss before step " << i + 1;
  }
  auto params = m->named_parameters();
  for (const auto& item : expected["params_after_3_steps"].items()) {
    const auto& p = params[item.key()];
    expect_samples_near(p, item.value(), rms_tolerance(item.value(), p.numel()), item.key() + " after 3 steps");
  }
}

INSTANTIATE_TEST_SUITE_P(Fixture, OptimizerTrajectory, ::testing::Values("adafactor", "adamw"));

TEST(Optimizers, WeightDecaySkipsBiasesAndLayerNorms) {
  FITSUM_REQUIRE_SHARED();
  auto m = load_fixture_model(shared_dir() / "fixtures" / "tiny-pegasus", false);
  const auto names = optim::decay_parameter_names(*m);
  const std::set<std::string> decay(names.begin(), names.end());
  EXPECT_TRUE(decay.count("model.shared.weight"));
  EXPECT_TRUE(decay.count("model.encoder.layers.0.fc1.weight"));
  EXPECT_TRUE(decay.count("model.decoder.layers.1.encoder_attn.k_proj.weight"));
  EXPECT_FALSE(decay.count("model.encoder.layers.0.fc1.bias"));
  EXPECT_FALSE(decay.count("model.encoder.layers.0.self_attn_layer_norm.weight"));
  EXPECT_FALSE(decay.count("model.decoder.layer_norm.weight"));
  EXPECT_FALSE(decay.count("model.encoder.embed_positions.weight"));  // a buffer: never trained
  EXPECT_FALSE(decay.count("final_logits_bias"));
  // Every trainable tensor: 2 per linear (weight decays) ...; count the decayed ones exactly.
  std::size_t matrices = 0;
  for (const auto& [name, p] : optim::trainable_parameters(*m)) {
    if (p.dim() == 2) ++matrices;
  }
  EXPECT_EQ(decay.size(), matrices);
}

TEST(Optimizers, NameKeyedStateResumesExactly) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = shared_dir() / "fixtures" / "tiny-pegasus";
  const auto c = util::read_json_file(dir / "case.json");
  for (const auto* kind : {"adamw_torch", "adafactor"}) {
    optim::OptimizerSettings settings;
    settings.type = optim::parse_optimizer_type(kind);
    settings.learning_rate = 1e-3;
    settings.weight_decay = 0.01;
    // Uninterrupted: 3 steps.
    auto a = load_fixture_model(dir, false);
    auto opt_a = optim::make_optimizer(*a, settings);
    run_steps(a, *opt_a, c, 3);
    // Interrupted after 2 steps: state exported by name, imported into a fresh optimizer on a copy.
    auto b = load_fixture_model(dir, false);
    auto opt_b = optim::make_optimizer(*b, settings);
    run_steps(b, *opt_b, c, 2);
    const auto state = optim::export_optimizer_state(*opt_b, optim::trainable_parameters(*b));
    std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
    auto resumed = load_fixture_model(dir, false);
    {
      torch::NoGradGuard no_grad;
      auto src = b->named_parameters();
      for (auto& item : resumed->named_parameters()) item.value().copy_(src[item.key()]);
    }
    auto opt_r = optim::make_optimizer(*resumed, settings);
    optim::import_optimizer_state(*opt_r, optim::trainable_parameters(*resumed), by_name);
    run_steps(resumed, *opt_r, c, 1);
    auto pa = a->named_parameters();
    for (const auto& item : resumed->named_parameters()) {
      EXPECT_TRUE(torch::equal(item.value(), pa[item.key()])) << kind << " " << item.key();
    }
  }
}

TEST(Optimizers, ClipGradNormMatchesTorch) {
  auto p1 = torch::zeros({2}, torch::requires_grad());
  auto p2 = torch::zeros({1}, torch::requires_grad());
  p1.mutable_grad() = torch::tensor({3.0f, 0.0f});
  p2.mutable_grad() = torch::tensor({4.0f});
  EXPECT_NEAR(optim::clip_grad_norm({p1, p2}, 1.0).item<double>(), 5.0, 1e-6);
  EXPECT_NEAR(p1.grad()[0].item<double>(), 3.0 / (5.0 + 1e-6), 1e-7);
  EXPECT_NEAR(optim::clip_grad_norm({p1, p2}, 0.0).item<double>(), 1.0, 1e-6);  // measure only
  EXPECT_THROW(optim::parse_optimizer_type("sgd"), std::invalid_argument);
}

}  // namespace
}  // namespace fitsum::test
