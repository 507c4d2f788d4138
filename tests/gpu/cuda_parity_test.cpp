// The fixture parity tests on a CUDA device (label `gpu`; bench/gpu.sh runs them on a lent GPU machine): loss,
// logits and gradients against ../shared/fixtures in float32 at the CPU tolerances, again under bfloat16 autocast
// at looser ones, Adafactor's three-step trajectory, and the fast paths (in-place embedding gradient, fused LM head
// loss) against the plain ones on the device. Without a CUDA device they skip; FITSUM_GPU_TESTS_ON_CPU=1 runs them
// on the CPU instead, to check the tests themselves.

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "fitsum/optim/optimizers.h"
#include "fitsum/util/torch_compat.h"
#include "fixture_support.h"
#include "gpu_device.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

#define FITSUM_REQUIRE_DEVICE()                                                                          \
  FITSUM_REQUIRE_SHARED();                                                                               \
  const auto maybe_device = gpu_test_device();                                                           \
  if (!maybe_device) GTEST_SKIP() << "no CUDA device (FITSUM_GPU_TESTS_ON_CPU=1 runs these on the CPU)"; \
  const torch::Device device = *maybe_device

fs::path fixture_dir() { return shared_dir() / "fixtures" / "tiny-pegasus"; }

struct Case {
  nlohmann::json json;
  torch::Tensor ids, mask, labels;
};

Case load_case(const torch::Device& device) {
  Case c;
  c.json = util::read_json_file(fixture_dir() / "case.json");
  c.ids = long_tensor(c.json["input_ids"]).to(device);
  c.mask = long_tensor(c.json["attention_mask"]).to(device);
  c.labels = long_tensor(c.json["labels"]).to(device);
  return c;
}

model::Seq2SeqLM fixture_model(const torch::Device& device) {
  auto m = load_fixture_model(fixture_dir(), /*reference_embedding=*/true);
  m->to(device);
  return m;
}

double global_grad_norm(model::Seq2SeqLM& m) {
  double sum_sq = 0.0;
  for (const auto& p : m->parameters()) {
    if (p.grad().defined()) sum_sq += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
  }
  return std::sqrt(sum_sq);
}

TEST(CudaParity, Float32ForwardAndGradients) {
  FITSUM_REQUIRE_DEVICE();
  const auto c = load_case(device);
  auto m = fixture_model(device);
  m->train();  // every dropout of the fixture is 0
  auto out = m->forward(c.ids, c.mask, c.labels);
  const double loss = c.json["loss"].get<double>();
  EXPECT_CLOSE(out.loss.item<double>(), loss, relative(1e-5));
  expect_samples_near(out.logits.cpu(), c.json["logits"], 1e-4, "logits");
  expect_samples_near(out.encoder_hidden_state.cpu(), c.json["encoder_last_hidden_state"], 1e-4, "encoder states");
  out.loss.backward();
  auto params = m->named_parameters();
  for (const auto& item : c.json["grads"].items()) {
    const auto grad = params[item.key()].grad().cpu();
    expect_samples_near(grad, item.value(), rms_tolerance(item.value(), grad.numel()), "grad of " + item.key());
  }
  const double expected = c.json["grad_global_l2"].get<double>();
  EXPECT_CLOSE(global_grad_norm(m), expected, relative(1e-5));
}

TEST(CudaParity, FusedLossPathMatchesTheFixture) {
  FITSUM_REQUIRE_DEVICE();
  const auto c = load_case(device);
  auto m = fixture_model(device);
  m->train();
  auto hidden = m->decode(m->shift_tokens_right(c.labels), m->encode(c.ids, c.mask), c.mask);
  const auto token_loss = m->token_loss(hidden, c.labels);
  const double loss = c.json["loss"].get<double>();
  EXPECT_CLOSE(token_loss.sum.item<double>() / static_cast<double>(token_loss.tokens), loss, relative(1e-5));
  (token_loss.sum / static_cast<double>(token_loss.tokens)).backward();
  auto params = m->named_parameters();
  for (const auto& item : c.json["grads"].items()) {
    const auto grad = params[item.key()].grad().cpu();
    expect_samples_near(grad, item.value(), rms_tolerance(item.value(), grad.numel()), "grad of " + item.key());
  }
  const double expected = c.json["grad_global_l2"].get<double>();
  EXPECT_CLOSE(global_grad_norm(m), expected, relative(1e-5));
}

// bfloat16 autocast keeps 8 bits of mantissa in the products: the loss within 2%, logits within 5% of their
// largest magnitude, the gradient's global norm within 5%.
TEST(CudaParity, Bfloat16AutocastWithinLooserTolerances) {
  FITSUM_REQUIRE_DEVICE();
  const auto c = load_case(device);
  auto m = fixture_model(device);
  m->train();
  torch::Tensor logits, loss;
  {
    util::AutocastGuard autocast(device.type(), torch::kBFloat16);
    auto hidden = m->decode(m->shift_tokens_right(c.labels), m->encode(c.ids, c.mask), c.mask);
    logits = m->lm_logits(hidden).to(torch::kFloat);
    loss = kernels::label_cross_entropy(logits, c.labels);
  }
  const double expected_loss = c.json["loss"].get<double>();
  EXPECT_CLOSE(loss.item<double>(), expected_loss, relative(2e-2));
  const auto flat = logits.detach().cpu().reshape({-1}).to(torch::kDouble);
  const auto& sample = c.json["logits"];
  double largest = 0.0;
  for (const auto& v : sample["value"]) largest = std::max(largest, std::abs(v.get<double>()));
  for (std::size_t i = 0; i < sample["index"].size(); ++i) {
    EXPECT_NEAR(flat[sample["index"][i].get<std::int64_t>()].item<double>(), sample["value"][i].get<double>(),
                5e-2 * largest)
        << "logit sample " << i;
  }
  loss.backward();
  const double expected_norm = c.json["grad_global_l2"].get<double>();
  EXPECT_CLOSE(global_grad_norm(m), expected_norm, relative(5e-2));
}

TEST(CudaParity, AdafactorTrajectory) {
  FITSUM_REQUIRE_DEVICE();
  const auto c = load_case(device);
  const auto& expected = c.json["adafactor"];
  auto m = fixture_model(device);
  m->train();
  optim::OptimizerSettings settings;
  settings.type = optim::OptimizerType::adafactor;
  settings.learning_rate = expected["learning_rate"];
  settings.weight_decay = expected["weight_decay"];
  auto opt = optim::make_optimizer(*m, settings);
  for (int step = 0; step < 3; ++step) {
    opt->zero_grad();
    auto hidden = m->decode(m->shift_tokens_right(c.labels), m->encode(c.ids, c.mask), c.mask);
    const auto token_loss = m->token_loss(hidden, c.labels);
    const auto loss = token_loss.sum / static_cast<double>(token_loss.tokens);
    const double want = expected["losses_before_each_step"][step].get<double>();
    EXPECT_CLOSE(loss.item<double>(), want, relative(step == 0 ? 1e-5 : 1e-4)) << "loss before step " << step + 1;
    loss.backward();
    opt->step();
  }
  auto params = m->named_parameters();
  for (const auto& item : expected["params_after_3_steps"].items()) {
    const auto p = params[item.key()].detach().cpu();
    expect_samples_near(p, item.value(), rms_tolerance(item.value(), p.numel()), item.key() + " after 3 steps");
  }
}

// Two accumulated micro-batches through the fast paths and through the plain ones give the same gradients.
TEST(CudaParity, FastPathsEqualPlainPaths) {
  FITSUM_REQUIRE_DEVICE();
  const auto c = load_case(device);
  std::map<std::string, torch::Tensor> grads[2];
  for (int fast = 0; fast < 2; ++fast) {
    auto m = load_fixture_model(fixture_dir(), /*reference_embedding=*/false);  // HF padding_idx
    m->to(device);
    m->train();
    model::KernelChoices kernels;
    kernels.in_place_embedding_gradient = fast == 1;
    m->set_kernel_choices(kernels);
    for (int micro = 0; micro < 2; ++micro) {
      auto hidden = m->decode(m->shift_tokens_right(c.labels), m->encode(c.ids, c.mask), c.mask);
      const auto loss =
          fast ? m->token_loss(hidden, c.labels, 0.1) : kernels::label_loss_sum(m->lm_logits(hidden), c.labels, 0.1);
      (loss.sum * 0.5).backward();
    }
    for (const auto& item : m->named_parameters()) {
      if (item.value().grad().defined()) grads[fast][item.key()] = item.value().grad().cpu();
    }
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (const auto& [name, plain] : grads[0]) {
    if (name.find("k_proj.bias") != std::string::npos) continue;  // rounding noise on both sides
    EXPECT_CLOSE(grads[1].at(name), plain, relative(1e-5)) << name;
  }
}

}  // namespace
}  // namespace fitsum::test
