// LoRA adapters (model/lora.h) against their definition: y = W x + b + scaling B A x on the targeted layers, only
// adapter tensors trained, the same gradients whatever kernels and checkpointing compute them, a merged model equal
// to the adapted one, and a bfloat16 base equal to a float32 base holding the same rounded weights. Parity with PEFT
// itself is tests/hf/test_lora.py's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/io/hf_config.h"
#include "fitsum/kernels/few_rows_linear.h"
#include "fitsum/model/lora.h"
#include "fitsum/model/micro_step.h"
#include "fitsum/model/seq2seq.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

model::Seq2SeqLM fixture_model(const std::string& name) {
  auto folder = source_dir() / "tests" / "data" / "fixtures" / name;
  if (!fs::exists(folder / "config.json")) folder = shared_dir() / "fixtures" / name;
  auto config = io::read_model_config(folder);
  config.dropout = 0.0;
  config.attention_dropout = 0.0;
  config.activation_dropout = 0.0;
  model::Seq2SeqLM m(config);
  model::init_weights(*m, 5);
  return m;
}

model::LoraConfig lora(std::vector<std::string> targets, std::int64_t r = 4, double alpha = 8.0) {
  model::LoraConfig c;
  c.r = r;
  c.lora_alpha = alpha;
  c.target_modules = std::move(targets);
  return c;
}

// PEFT starts B at zero; tests that look at gradients or outputs give B values too.
void randomize_b(model::Seq2SeqLMImpl& m) {
  torch::manual_seed(3);
  torch::NoGradGuard no_grad;
  for (auto& item : m.named_parameters()) {
    if (item.key().find(".lora_B.") != std::string::npos) item.value().normal_(0.0, 0.05);
  }
}

struct Batch {
  torch::Tensor ids, mask, labels;
};

Batch batch(std::int64_t vocab) {
  torch::manual_seed(7);
  Batch b;
  b.ids = torch::randint(3, vocab, {2, 11}, torch::kLong);
  b.mask = torch::ones_like(b.ids);
  b.mask[1].narrow(0, 8, 3).zero_();
  b.labels = torch::randint(3, vocab, {2, 6}, torch::kLong);
  b.labels[0][5] = -100;
  return b;
}

double loss_and_backward(model::Seq2SeqLM& m, const Batch& b) {
  m->zero_grad();
  model::MicroBatchOptions options;
  const auto loss = model::forward_backward(*m, b.ids, b.mask, b.labels, options);
  return loss.sum.item<double>();
}

std::map<std::string, torch::Tensor> grads(model::Seq2SeqLM& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : m->named_parameters()) {
    if (item.value().grad().defined()) out[item.key()] = item.value().grad().clone();
  }
  return out;
}

TEST(Lora, ATargetedLayerAddsItsScaledLowRankProduct) {
  auto m = fixture_model("tiny-pegasus");
  model::apply_lora(*m, lora({"q_proj", "v_proj"}, 4, 12.0), 1);
  randomize_b(*m);
  auto& q = m->model->encoder->layers[0]->as<model::TransformerLayerImpl>()->self_attn->q_proj;
  const auto adapter = model::lora_adapter_of(*q);
  ASSERT_TRUE(adapter);
  EXPECT_EQ(adapter.lora_A->weight.sizes(), (std::vector<std::int64_t>{4, q->weight.size(1)}));
  EXPECT_DOUBLE_EQ(adapter.settings->scaling, 3.0);
  torch::manual_seed(1);
  const auto x = torch::randn({2, 5, q->weight.size(1)});
  const auto want =
      torch::addmm(q->bias, x.reshape({10, -1}), q->weight.t()) +
      3.0 * torch::mm(torch::mm(x.reshape({10, -1}), adapter.lora_A->weight.t()), adapter.lora_B->weight.t());
  EXPECT_CLOSE(model::project(q, x).reshape({10, -1}), want, relative(1e-5));
  // Untargeted layers have none.
  EXPECT_FALSE(
      model::lora_adapter_of(*m->model->encoder->layers[0]->as<model::TransformerLayerImpl>()->self_attn->k_proj));
}

TEST(Lora, RsLoraScalesByTheSquareRootOfTheRank) {
  auto c = lora({"q_proj"}, 16, 8.0);
  EXPECT_DOUBLE_EQ(c.scaling(), 0.5);
  c.use_rslora = true;
  EXPECT_DOUBLE_EQ(c.scaling(), 2.0);
}

TEST(Lora, AFreshAdapterLeavesTheModelUnchangedAndInitialisesAsPeft) {
  auto base = fixture_model("tiny-pegasus");
  const auto b = batch(base->config().vocab_size);
  const double before = loss_and_backward(base, b);
  model::apply_lora(*base, lora({"q_proj", "v_proj"}), 1);
  EXPECT_EQ(loss_and_backward(base, b), before);  // B = 0: exactly the base model's loss
  for (const auto& item : base->named_parameters()) {
    if (item.key().find(".lora_A.") == std::string::npos) continue;
    const double bound = 1.0 / std::sqrt(static_cast<double>(item.value().size(1)));
    EXPECT_LE(item.value().abs().max().item<double>(), bound) << item.key();
    EXPECT_GT(item.value().abs().max().item<double>(), 0.5 * bound) << item.key();
  }
}

TEST(Lora, OnlyAdapterTensorsRequireAndGetGradients) {
  auto m = fixture_model("tiny-pegasus");
  auto c = lora({"q_proj", "v_proj"});
  model::apply_lora(*m, c, 1);
  randomize_b(*m);
  loss_and_backward(m, batch(m->config().vocab_size));
  std::size_t adapters = 0;
  for (const auto& item : m->named_parameters()) {
    const bool adapter = item.key().find(".lora_") != std::string::npos;
    EXPECT_EQ(item.value().requires_grad(), adapter) << item.key();
    EXPECT_EQ(item.value().grad().defined(), adapter) << item.key();
    if (adapter) {
      ++adapters;
      EXPECT_GT(item.value().grad().abs().max().item<double>(), 0.0) << item.key();
    }
  }
  // q_proj and v_proj of 2 encoder self-attentions, 2 decoder self- and 2 cross-attentions, A and B each.
  EXPECT_EQ(adapters, 2u * 2u * (2u + 2u * 2u));
  EXPECT_EQ(model::lora_state(*m, c).size(), adapters);
}

TEST(Lora, BiasModesAndModulesToSaveTrainWhatPeftTrains) {
  auto m = fixture_model("tiny-pegasus");
  auto c = lora({"fc1"});
  c.bias = model::LoraBias::lora_only;
  c.modules_to_save = {"final_layer_norm"};
  model::apply_lora(*m, c, 1);
  for (const auto& item : m->named_parameters()) {
    const auto& k = item.key();
    const bool want = k.find(".lora_") != std::string::npos || k.find("fc1.bias") != std::string::npos ||
                      k.find("final_layer_norm.") != std::string::npos;
    EXPECT_EQ(item.value().requires_grad(), want) << k;
  }
  auto all = fixture_model("tiny-pegasus");
  auto c2 = lora({"fc1"});
  c2.bias = model::LoraBias::all;
  model::apply_lora(*all, c2, 1);
  EXPECT_TRUE(
      all->model->encoder->layers[0]->as<model::TransformerLayerImpl>()->self_attn->k_proj->bias.requires_grad());
}

TEST(Lora, TargetsFollowPeftsMatchingAndBadOnesAreNamed) {
  auto m = fixture_model("tiny-pegasus");
  const auto all = model::lora_target_names(*m, lora({"all-linear"}));
  EXPECT_EQ(all.size(), 2u * 6u + 2u * 10u);  // 6 Linear per encoder layer, 10 per decoder layer; no lm_head
  EXPECT_EQ(model::lora_target_names(*m, lora({})).size(), 2u * 2u + 2u * 4u);  // q_proj, v_proj by default
  EXPECT_EQ(model::lora_target_names(*m, lora({"encoder.layers.0.fc1"})).size(), 1u);
  const auto t5_names = error_of<std::invalid_argument>([&] { model::lora_target_names(*m, lora({"q", "v"})); });
  EXPECT_NE(t5_names.find("match no layer"), std::string::npos) << t5_names;
  EXPECT_NE(t5_names.find("q_proj"), std::string::npos) << t5_names;
  const auto norm =
      error_of<std::invalid_argument>([&] { model::lora_target_names(*m, lora({"self_attn_layer_norm"})); });
  EXPECT_NE(norm.find("not a Linear layer"), std::string::npos) << norm;
  auto t5 = fixture_model("tiny-t5");
  EXPECT_EQ(model::lora_target_names(*t5, lora({})).size(), 2u * 2u + 3u * 4u);  // q, v
  const auto all_t5 = model::lora_target_names(*t5, lora({"all-linear"}));
  EXPECT_EQ(std::count(all_t5.begin(), all_t5.end(), "lm_head"), 0);
  EXPECT_THROW(model::apply_lora(*m, lora({"q_proj"}, -1), 1), std::invalid_argument);
  auto dropout = lora({"q_proj"});
  dropout.lora_dropout = 1.0;
  EXPECT_THROW(model::apply_lora(*m, dropout, 1), std::invalid_argument);
}

// The same adapter gradients through every path a step can take: all-linear (fc2's adapter off the fused
// feed-forward node), with and without per-layer checkpointing, on PEGASUS and T5.
void expect_paths_agree(const std::string& fixture) {
  auto reference = fixture_model(fixture);
  model::apply_lora(*reference, lora({"all-linear"}), 1);
  randomize_b(*reference);
  const auto b = batch(reference->config().vocab_size);
  model::KernelChoices plain;
  plain.recomputed_feed_forward = false;
  plain.byte_mask_dropout = false;
  plain.fused_rms_norm = false;
  reference->set_kernel_choices(plain);
  const double want_loss = loss_and_backward(reference, b);
  const auto want = grads(reference);
  ASSERT_EQ(want.size(), model::lora_state(*reference, lora({"all-linear"})).size()) << "every adapter has a gradient";
  for (const bool checkpointed : {false, true}) {
    auto m = fixture_model(fixture);
    model::apply_lora(*m, lora({"all-linear"}), 1);
    randomize_b(*m);
    if (checkpointed) m->set_gradient_checkpointing(100, 100);
    EXPECT_CLOSE(loss_and_backward(m, b), want_loss, relative(1e-5)) << fixture << " checkpointed " << checkpointed;
    const auto got = grads(m);
    ASSERT_EQ(got.size(), want.size()) << fixture << " checkpointed " << checkpointed;
    for (const auto& [name, g] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      EXPECT_CLOSE(got.at(name), g, relative(1e-4)) << fixture << " " << name << " checkpointed " << checkpointed;
    }
  }
}

TEST(Lora, GradientsAgreeAcrossKernelsAndCheckpointing) {
  expect_paths_agree("tiny-pegasus");
  expect_paths_agree("tiny-t5");
}

TEST(Lora, AMergedModelComputesWhatTheAdaptedOneDid) {
  auto m = fixture_model("tiny-pegasus");
  model::apply_lora(*m, lora({"all-linear"}, 4, 16.0), 1);
  randomize_b(*m);
  const auto b = batch(m->config().vocab_size);
  const double adapted = loss_and_backward(m, b);
  model::merge_lora(*m);
  EXPECT_FALSE(model::has_lora(*m));
  for (const auto& item : m->named_parameters()) {
    EXPECT_EQ(item.key().find("lora"), std::string::npos) << item.key();
    EXPECT_TRUE(item.value().requires_grad()) << item.key();
  }
  EXPECT_CLOSE(loss_and_backward(m, b), adapted, relative(1e-5));
  const double base = [&] {
    auto plain = fixture_model("tiny-pegasus");
    return loss_and_backward(plain, b);
  }();
  EXPECT_GT(std::abs(adapted - base), 1e-3 * std::abs(base));  // the adapters changed the model
}

// A base held in bfloat16 computes what a float32 base holding the same bfloat16-rounded weights computes.
TEST(Lora, ABfloat16BaseEqualsAFloat32BaseOfTheSameRoundedWeights) {
  auto held = fixture_model("tiny-pegasus");
  auto rounded = fixture_model("tiny-pegasus");
  for (auto* m : {&held, &rounded}) {
    model::apply_lora(**m, lora({"q_proj", "v_proj"}), 1);
    randomize_b(**m);
  }
  const auto saved = model::hold_frozen_linears_in_bfloat16(*held);
  std::int64_t float_bytes = 0;
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : rounded->named_modules("", false)) {
      auto linear = std::dynamic_pointer_cast<torch::nn::LinearImpl>(item.value());
      if (!linear || item.key().find("lora") != std::string::npos) continue;
      linear->weight.copy_(linear->weight.to(torch::kBFloat16).to(torch::kFloat32));
      float_bytes += linear->weight.numel() * 4;
    }
  }
  EXPECT_EQ(saved * 2, float_bytes);  // every base Linear weight halved
  auto q = held->model->encoder->layers[0]->as<model::TransformerLayerImpl>()->self_attn->q_proj;
  EXPECT_EQ(q->weight.scalar_type(), torch::kBFloat16);
  const auto b = batch(held->config().vocab_size);
  EXPECT_CLOSE(loss_and_backward(held, b), loss_and_backward(rounded, b), relative(1e-5));
  const auto want = grads(rounded);
  const auto got = grads(held);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, g] : want) EXPECT_CLOSE(got.at(name), g, relative(1e-4)) << name;
  held->eval();
  rounded->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({3, q->weight.size(1)});
  EXPECT_CLOSE(
      model::project(q, x),
      model::project(rounded->model->encoder->layers[0]->as<model::TransformerLayerImpl>()->self_attn->q_proj, x),
      relative(1e-5));
}

}  // namespace
}  // namespace fitsum::test
