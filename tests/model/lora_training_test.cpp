// LoRA training through the Trainer (train/lora_setup.h prepares the model as fitsum train does): the frozen base
// keeps its bits while the adapters learn; the optimizer holds the trainable tensors alone, grouped for weight decay
// as HF's Trainer groups a PEFT model's; accumulation, gradient checkpointing, bf16 autocast with a bfloat16 base,
// out-of-memory recovery and two data-parallel processes train what one plain process trains.
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/model/lora.h"
#include "fitsum/optim/optimizers.h"
#include "fitsum/train/distributed.h"
#include "fitsum/train/lora_setup.h"
#include "fitsum/train/trainer.h"
#include "fixture_support.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct LoraSetup {
  std::int64_t micro_batch = 4;
  std::int64_t accumulation = 1;
  std::int64_t steps = 3;
  bool checkpointing = false;
  bool bf16 = false;
  bool freeze_embeds = false;
  std::int64_t lora_r = 4;  // 0: full fine-tuning
  double lora_dropout = 0.0;
  std::string base_dtype = "float32";
  optim::OptimizerType optimizer = optim::OptimizerType::adamw_torch;
  double learning_rate = 1e-2;
  int zero_stage = 0;
  bool failing_backward = false;  // an out-of-memory error in the first backward of step 2
  std::string perturbed;          // a frozen parameter changed before training (a process that read another base)
};

struct LoraRun {
  std::vector<double> losses;
  NamedTensors before, after;  // every parameter, before and after training
  std::vector<std::string> messages;
  std::string description;  // prepare_lora's line
};

bool is_adapter(const std::string& name) { return name.find(".lora_") != std::string::npos; }

// Copy-task examples of different lengths within the tiny fixture's vocabulary.
std::vector<data::Example> copy_examples(int count) {
  std::vector<data::Example> out;
  for (int i = 0; i < count; ++i) {
    data::Example e;
    e.line = static_cast<std::size_t>(i + 1);
    const int length = 6 + (i * 5) % 11;
    for (int j = 0; j < length; ++j) e.input_ids.push_back(103 + (i * 7 + j * 3) % 60);
    e.input_ids.push_back(1);
    e.labels = std::vector<data::TokenId>(e.input_ids.begin() + 1, e.input_ids.end());
    out.push_back(e);
  }
  return out;
}

NamedTensors snapshot(model::Seq2SeqLMImpl& model) {
  NamedTensors out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value().detach().clone());
  return out;
}

train::TrainingArguments lora_arguments(const LoraSetup& s, const std::string& name) {
  train::TrainingArguments args;
  args.output_dir = temp_dir("lora-" + name).string();
  args.overwrite_output_dir = true;
  args.max_steps = s.steps;
  args.logging_steps = 1;
  args.save_strategy = train::IntervalStrategy::no;
  args.optim = s.optimizer;
  args.learning_rate = s.learning_rate;
  args.weight_decay = 0.01;
  args.max_grad_norm = 0.5;
  args.lr_scheduler_type = train::LrSchedulerType::constant;
  args.per_device_train_batch_size = s.micro_batch;
  args.gradient_accumulation_steps = s.accumulation;
  args.gradient_checkpointing = s.checkpointing;
  args.bf16 = s.bf16;
  args.freeze_embeds = s.freeze_embeds;
  args.zero_stage = s.zero_stage;
  args.lora.r = s.lora_r;
  args.lora.lora_alpha = 8;
  args.lora.lora_dropout = s.lora_dropout;
  args.lora.target_modules = {"q_proj", "v_proj", "fc1"};
  if (s.lora_r == 0) args.lora = {};
  args.base_dtype = s.base_dtype;
  return args;
}

// Out of memory in the backward of the bottom encoder layer's adapter, once, in step 2.
void inject_out_of_memory(model::Seq2SeqLMImpl& model, train::TrainerCallbacks& callbacks) {
  auto armed = std::make_shared<bool>(false);
  model.named_parameters()["model.encoder.layers.0.self_attn.q_proj.lora_A.weight"].register_hook(
      [armed](const torch::Tensor& grad) {
        if (*armed) {
          *armed = false;
          TORCH_CHECK_WITH(OutOfMemoryError, false, "injected: out of memory during backward");
        }
        return grad;
      });
  callbacks.on_step = [armed](std::int64_t step, std::int64_t) { *armed = step == 1; };
}

LoraRun train_lora(const LoraSetup& s, const std::string& name,
                   const std::shared_ptr<train::ProcessGroup>& group = nullptr) {
  LoraRun run;
  auto model = load_fixture_model(shared_dir() / "fixtures" / "tiny-pegasus", false);
  auto args = lora_arguments(s, name);
  args.validate();
  run.description = train::prepare_lora(*model, args);
  if (!s.perturbed.empty()) {
    torch::NoGradGuard no_grad;
    model->named_parameters()[s.perturbed].add_(1e-3);
  }
  run.before = snapshot(*model);
  train::TrainerInputs inputs;
  inputs.model = model;
  inputs.train_examples = copy_examples(16);
  inputs.process_group = group;
  train::TrainerCallbacks callbacks;
  callbacks.on_log = [&](const nlohmann::ordered_json& entry) {
    if (entry.contains("loss")) run.losses.push_back(entry["loss"].get<double>());
  };
  callbacks.on_message = [&](const std::string& m) { run.messages.push_back(m); };
  if (s.failing_backward) inject_out_of_memory(*model, callbacks);
  train::Trainer trainer(args, std::move(inputs), callbacks);
  EXPECT_EQ(trainer.train().global_step, s.steps);
  run.after = snapshot(*model);
  return run;
}

void expect_same_training(const LoraRun& reference, const LoraRun& run, double relative_bound) {
  ASSERT_EQ(run.losses.size(), reference.losses.size());
  for (std::size_t i = 0; i < reference.losses.size(); ++i) {
    EXPECT_CLOSE(run.losses[i], reference.losses[i], relative(relative_bound)) << "step " << i + 1;
  }
  ASSERT_EQ(run.after.size(), reference.after.size());
  for (std::size_t i = 0; i < reference.after.size(); ++i) {
    EXPECT_CLOSE(run.after[i].second.to(torch::kFloat), reference.after[i].second.to(torch::kFloat),
                 relative(relative_bound))
        << reference.after[i].first;
  }
}

// The base's bits are the ones it started with; every adapter changed (B starts at zero, A at random).
void expect_only_adapters_trained(const LoraRun& run) {
  std::size_t adapters = 0;
  for (std::size_t i = 0; i < run.before.size(); ++i) {
    const auto& [name, before] = run.before[i];
    if (is_adapter(name)) {
      adapters += 1;
      EXPECT_FALSE(torch::equal(run.after[i].second, before)) << name << " did not train";
    } else {
      EXPECT_TRUE(torch::equal(run.after[i].second, before)) << name << " of the frozen base changed";
    }
  }
  // A and B of 16 layers: q, v and fc1 of 2 encoder layers; self q, v, cross q, v and fc1 of 2 decoder layers.
  EXPECT_EQ(adapters, 2u * 16u);
}

TEST(LoraTraining, BaseStaysBitIdenticalWhileAdaptersLearnAndLossFalls) {
  FITSUM_REQUIRE_SHARED();
  LoraSetup s;
  s.steps = 8;
  const auto run = train_lora(s, "learn");
  EXPECT_NE(run.description.find("LoRA r 4, alpha 8 (scaling 2) on 16 layers (v_proj, q_proj, fc1): 4480 of "),
            std::string::npos)
      << run.description;
  expect_only_adapters_trained(run);
  ASSERT_EQ(run.losses.size(), 8u);
  EXPECT_LT(run.losses.back(), 0.9 * run.losses.front());
}

// HF's Trainer on a PEFT model (transformers 4.47.1, peft 0.21.2, tiny-pegasus, bias="all",
// modules_to_save=["layer_norm"]): its optimizer holds the 24 lora_A / lora_B weights with weight decay and the 56
// biases and LayerNorm parameters PEFT made trainable without; no frozen tensor at all.
TEST(LoraOptimizer, HoldsOnlyTrainableTensorsGroupedAsHfTrainerGroupsAPeftModel) {
  FITSUM_REQUIRE_SHARED();
  auto model = load_fixture_model(shared_dir() / "fixtures" / "tiny-pegasus", false);
  model::LoraConfig config;
  config.r = 4;
  config.bias = model::LoraBias::all;
  config.modules_to_save = {"layer_norm"};
  model::apply_lora(*model, config, 42);
  optim::OptimizerSettings settings;
  settings.weight_decay = 0.01;
  auto optimizer = optim::make_optimizer(*model, settings);
  std::map<const void*, std::string> names;
  for (const auto& p : model->named_parameters()) names[p.value().unsafeGetTensorImpl()] = p.key();
  ASSERT_EQ(optimizer->param_groups().size(), 2u);
  std::vector<std::set<std::string>> groups(2);
  for (std::size_t g = 0; g < 2; ++g) {
    for (const auto& p : optimizer->param_groups()[g].params()) groups[g].insert(names.at(p.unsafeGetTensorImpl()));
  }
  EXPECT_EQ(groups[0].size(), 24u);
  for (const auto& name : groups[0]) EXPECT_TRUE(is_adapter(name)) << name << " is decayed";
  EXPECT_EQ(groups[1].size(), 56u);
  for (const auto& name : groups[1]) {
    EXPECT_TRUE(name.find("bias") != std::string::npos || name.find("layer_norm") != std::string::npos) << name;
  }
  // One step: state for exactly the tensors the groups hold.
  torch::Tensor ids = torch::tensor({{110, 111, 112, 1}}, torch::kLong);
  auto hidden = model->decode(model->shift_tokens_right(ids), model->encode(ids, torch::ones_like(ids)),
                              torch::ones_like(ids));
  model->lm_logits(hidden).sum().backward();
  optimizer->step();
  EXPECT_EQ(optimizer->state().size(), 24u + 56u);
  for (const auto& p : model->named_parameters()) {
    if (!p.value().requires_grad()) EXPECT_FALSE(p.value().grad().defined()) << p.key();
  }
}

// Adafactor at 1e-3, as tests/integration/train_test.cpp's GradientAccumulationIsExact runs it: within the project's
// accumulation bound (1e-5) the only difference is the rounding of the regrouped sums. (AdamW at 1e-2 normalises
// each entry's update, which carries that rounding to 3.5e-5 of B's largest entry after 3 steps.)
LoraSetup regrouping_setup() {
  LoraSetup s;
  s.optimizer = optim::OptimizerType::adafactor;
  s.learning_rate = 1e-3;
  return s;
}

// Accumulation is exact with adapters too: 4 examples at once or one at a time make the same steps.
TEST(LoraTraining, AccumulationOneByFourEqualsFourByOne) {
  FITSUM_REQUIRE_SHARED();
  const auto four = regrouping_setup();
  const auto reference = train_lora(four, "acc-4x1");
  LoraSetup one = four;
  one.micro_batch = 1;
  one.accumulation = 4;
  expect_same_training(reference, train_lora(one, "acc-1x4"), 1e-5);
}

// A checkpointed bottom layer's input (the frozen embedding's output) needs no gradient, its adapters do: they
// still get their gradients, and with LoRA dropout on (its masks replayed) the run equals the plain one.
TEST(LoraTraining, GradientCheckpointingEqualsThePlainRun) {
  FITSUM_REQUIRE_SHARED();
  LoraSetup plain;
  plain.lora_dropout = 0.1;
  const auto reference = train_lora(plain, "ckpt-off");
  auto checkpointed = plain;
  checkpointed.checkpointing = true;
  const auto run = train_lora(checkpointed, "ckpt-on");
  expect_only_adapters_trained(run);
  expect_same_training(reference, run, 1e-6);
}

// The same for full fine-tuning with --freeze_embeds, whose bottom encoder layer's input needs no gradient either.
TEST(LoraTraining, FreezeEmbedsWithGradientCheckpointingTrainsTheBottomLayer) {
  FITSUM_REQUIRE_SHARED();
  LoraSetup plain;
  plain.lora_r = 0;
  plain.freeze_embeds = true;
  const auto reference = train_lora(plain, "freeze-ckpt-off");
  auto checkpointed = plain;
  checkpointed.checkpointing = true;
  expect_same_training(reference, train_lora(checkpointed, "freeze-ckpt-on"), 1e-6);
}

// --freeze_embeds changes nothing in a LoRA run: the embedding is frozen with the rest of the base already.
TEST(LoraTraining, FreezeEmbedsIsHarmless) {
  FITSUM_REQUIRE_SHARED();
  LoraSetup plain;
  const auto reference = train_lora(plain, "freeze-off");
  auto frozen = plain;
  frozen.freeze_embeds = true;
  const auto run = train_lora(frozen, "freeze-on");
  expect_only_adapters_trained(run);
  expect_same_training(reference, run, 0.0);
}

// bf16 autocast over a base held in bfloat16: the adapters stay float32 and learn, the base keeps its bfloat16 bits,
// and the losses stay near the float32 run's (bfloat16 keeps 8 bits of mantissa).
TEST(LoraTraining, Bf16AutocastOverABfloat16Base) {
  FITSUM_REQUIRE_SHARED();
  LoraSetup plain;
  plain.steps = 4;
  const auto reference = train_lora(plain, "fp32");
  auto low = plain;
  low.bf16 = true;
  low.base_dtype = "bfloat16";
  const auto run = train_lora(low, "bf16");
  EXPECT_NE(run.description.find("held in bfloat16"), std::string::npos) << run.description;
  expect_only_adapters_trained(run);
  for (const auto& [name, t] : run.after) {
    const bool base_linear = !is_adapter(name) && (name.find("_proj.weight") != std::string::npos ||
                                                   name.find("fc1.weight") != std::string::npos ||
                                                   name.find("fc2.weight") != std::string::npos);
    EXPECT_EQ(t.scalar_type(), base_linear ? torch::kBFloat16 : torch::kFloat) << name;
  }
  for (std::size_t i = 0; i < run.losses.size(); ++i) {
    EXPECT_CLOSE(run.losses[i], reference.losses[i], relative(2e-2)) << "step " << i + 1;
  }
  EXPECT_LT(run.losses.back(), run.losses.front());
}

// An out-of-memory error in a backward redoes the step in halves: the same examples, the same update.
TEST(LoraTraining, OutOfMemoryRecoveryMakesTheSameUpdate) {
  FITSUM_REQUIRE_SHARED();
  const auto plain = regrouping_setup();
  const auto reference = train_lora(plain, "oom-none");
  auto failing = plain;
  failing.failing_backward = true;
  const auto run = train_lora(failing, "oom");
  std::string log;
  for (const auto& m : run.messages) log += m + "\n";
  EXPECT_NE(log.find("split into 2 + 2, redoing the step"), std::string::npos) << log;
  expect_only_adapters_trained(run);
  expect_same_training(reference, run, 1e-5);
}

// (ZeRO stage, base_dtype)
class LoraDataParallel : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

// Two processes (threads with a real Gloo group) of micro-batch 2 against one of twice the accumulation: the same
// adapters (within the regrouped sums' rounding, as gradient_reducer_test bounds it), one model on both, the base
// untouched everywhere.
TEST_P(LoraDataParallel, TwoProcessesTrainTheAdaptersOfOne) {
  FITSUM_REQUIRE_SHARED();
  LoraSetup setup;
  setup.micro_batch = 2;
  setup.accumulation = 4;
  setup.zero_stage = std::get<0>(GetParam());
  setup.base_dtype = std::get<1>(GetParam());
  const auto one = train_lora(setup, "dp-one");
  std::vector<LoraRun> ranks(2);
  auto each = setup;
  each.accumulation = 2;
  const auto errors = on_two_ranks([&](int r, std::shared_ptr<train::ProcessGroup> group) {
    ranks[static_cast<std::size_t>(r)] = train_lora(each, "dp-rank" + std::to_string(r), group);
  });
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  expect_same_training(one, ranks[0], 1e-4);
  for (const auto& run : ranks) {
    expect_only_adapters_trained(run);
    for (std::size_t i = 0; i < run.after.size(); ++i) {
      EXPECT_TRUE(torch::equal(run.after[i].second, ranks[0].after[i].second)) << run.after[i].first;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroStagesAndBases, LoraDataParallel,
                         ::testing::Values(std::tuple{0, "float32"}, std::tuple{2, "float32"},
                                           std::tuple{0, "bfloat16"}));

// The frozen base does not travel between the processes; a process that holds another base is refused by name.
TEST(LoraDataParallelBase, ProcessesWithDifferentBasesRefuseToTrain) {
  FITSUM_REQUIRE_SHARED();
  LoraSetup setup;
  setup.micro_batch = 2;
  setup.accumulation = 2;
  auto other = setup;
  other.perturbed = "model.encoder.layers.1.fc2.weight";
  const auto errors = on_two_ranks([&](int r, std::shared_ptr<train::ProcessGroup> group) {
    train_lora(r == 0 ? setup : other, "dp-base" + std::to_string(r), group);
  });
  for (const auto& error : errors) {
    EXPECT_NE(error.find("the processes disagree on frozen weights"), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace fitsum::test
