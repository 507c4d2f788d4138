// The Trainer as a library: an out-of-memory error that recovery cannot get around explains itself.
#include <gtest/gtest.h>

#include "fitsum/data/collator.h"
#include "fitsum/memory/planner.h"
#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/train/trainer.h"
#include "fitsum/util/files.h"
#include "fixture_support.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

// Example `i`: `source` copies of token 110 + i and `labels` copies of 120 + i, each ended by eos.
data::Example uniform_example(std::int64_t source, std::int64_t labels, int i) {
  data::Example e;
  e.input_ids = std::vector<data::TokenId>(static_cast<std::size_t>(source), 110 + i);
  e.input_ids.back() = 1;
  e.labels = std::vector<data::TokenId>(static_cast<std::size_t>(labels), 120 + i);
  e.labels->back() = 1;
  return e;
}

TEST(Trainer, OutOfMemorySaysWhatHeldTheMemoryAndWhichKnobsHelp) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("oom");
  train::TrainingArguments args;
  args.output_dir = dir.string();
  args.max_steps = 2;
  args.per_device_train_batch_size = 4;
  args.save_strategy = train::IntervalStrategy::no;
  train::TrainerInputs inputs;
  inputs.model = load_fixture_model(shared_dir() / "fixtures" / "tiny-pegasus", false);
  for (int i = 0; i < 8; ++i) {
    inputs.train_examples.push_back(uniform_example(40, 30, i));
  }
  train::Trainer trainer(args, std::move(inputs));
  auto& allocator = memory::TrackingCpuAllocator::instance();
  allocator.set_limit(allocator.current_bytes() + 200'000);  // far below what one step needs
  std::string message;
  try {
    trainer.train();
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  allocator.set_limit(0);
  EXPECT_NE(message.find("out of memory while training"), std::string::npos) << message;
  EXPECT_NE(message.find("weights"), std::string::npos) << message;
  EXPECT_NE(message.find("optimizer state"), std::string::npos) << message;
  // Recovery split the micro-batch down to one example and turned on full checkpointing before giving up.
  EXPECT_NE(message.find("even one example with gradient checkpointing of all layers does not fit"), std::string::npos)
      << message;
  EXPECT_NE(message.find("optim adafactor"), std::string::npos) << message;
}

// evaluate() runs the fused head + loss without gradients (the chunked plan): it must give HF's evaluation loss,
// the mean over batches of each batch's mean token loss from full logits (HF's evaluation loop).
TEST(Trainer, EvaluationLossEqualsFullLogitsLoss) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("eval");
  train::TrainingArguments args;
  args.output_dir = dir.string();
  args.max_steps = 1;
  args.per_device_eval_batch_size = 2;
  args.label_smoothing_factor = 0.1;
  train::TrainerInputs inputs;
  inputs.model = load_fixture_model(shared_dir() / "fixtures" / "tiny-pegasus", false);
  for (int i = 0; i < 5; ++i) {
    const auto e = uniform_example(6 + i, 3 + 2 * i, i);
    inputs.train_examples.push_back(e);
    inputs.eval_examples.push_back(e);
  }
  const auto eval_examples = inputs.eval_examples;
  auto model = inputs.model;
  train::Trainer trainer(args, std::move(inputs));
  const double fused = trainer.evaluate()["eval_loss"].get<double>();

  model->eval();
  torch::NoGradGuard no_grad;
  double sum_of_means = 0.0;
  for (std::size_t start = 0; start < eval_examples.size(); start += 2) {
    std::vector<std::size_t> indices;
    for (std::size_t i = start; i < std::min(eval_examples.size(), start + 2); ++i) indices.push_back(i);
    const auto batch = data::collate(eval_examples, indices);
    auto hidden = model->decode(model->shift_tokens_right(batch.labels),
                                model->encode(batch.input_ids, batch.attention_mask), batch.attention_mask);
    const auto loss = kernels::label_loss_sum(model->lm_logits(hidden), batch.labels, 0.1);
    sum_of_means += loss.sum.item<double>() / static_cast<double>(loss.tokens);
  }
  const double plain = sum_of_means / 3.0;  // 3 batches of 2, 2 and 1: HF's Trainer averages the batch means
  EXPECT_CLOSE(fused, plain, relative(1e-5));
}

// --freeze_embeds (HF's legacy seq2seq recipe): the shared embedding, and through the tie the LM head, keep their
// values; every other weight trains; the embedding gets neither a gradient nor optimizer state.
TEST(Trainer, FreezeEmbedsKeepsTheSharedEmbeddingAndTrainsTheRest) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("freeze-embeds");
  train::TrainingArguments args;
  args.output_dir = dir.string();
  args.max_steps = 2;
  args.per_device_train_batch_size = 2;
  args.learning_rate = 1e-2;
  args.save_strategy = train::IntervalStrategy::no;
  args.freeze_embeds = true;
  train::TrainerInputs inputs;
  inputs.model = load_fixture_model(shared_dir() / "fixtures" / "tiny-pegasus", false);
  auto model = inputs.model;
  for (int i = 0; i < 4; ++i) {
    inputs.train_examples.push_back(uniform_example(20, 10, i));
  }
  const auto shared_before = model->model->shared->weight.detach().clone();
  const auto& layer = model->model->encoder->layers[0];
  const auto fc1_before = layer->named_parameters()["fc1.weight"].detach().clone();
  train::Trainer trainer(args, std::move(inputs));
  trainer.train();
  EXPECT_TRUE(torch::equal(model->model->shared->weight, shared_before));
  EXPECT_TRUE(torch::equal(model->lm_head_weight(), shared_before));  // tied
  EXPECT_FALSE(model->model->shared->weight.grad().defined());
  EXPECT_FALSE(torch::equal(layer->named_parameters()["fc1.weight"], fc1_before));
  // The planner's counts agree: the embedding's elements leave the trainable count.
  const auto counts = memory::counts_with_frozen_embeddings(model->config());
  std::int64_t trainable = 0;
  for (const auto& p : model->parameters()) trainable += p.requires_grad() ? p.numel() : 0;
  EXPECT_EQ(counts.trainable, trainable);
}

// trainer_state.json is rewritten at every log, evaluation and save: a run that dies keeps its history. Each
// callback reads the file as it stands when the trainer reports the entry.
TEST(Trainer, TrainerStateIsRewrittenAtEveryLogEvaluationAndSave) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("state");
  train::TrainingArguments args;
  args.output_dir = (dir / "out").string();
  args.max_steps = 4;
  args.per_device_train_batch_size = 2;
  args.logging_steps = 1;
  args.eval_strategy = train::IntervalStrategy::steps;
  args.eval_steps = 2;
  args.save_steps = 2;
  train::TrainerInputs inputs;
  inputs.model = load_fixture_model(shared_dir() / "fixtures" / "tiny-pegasus", false);
  for (int i = 0; i < 4; ++i) {
    const auto e = uniform_example(5 + i, 3 + i, i);
    inputs.train_examples.push_back(e);
    inputs.eval_examples.push_back(e);
  }
  const auto state_file = dir / "out" / "trainer_state.json";
  std::vector<std::string> problems;
  std::size_t entries = 0;
  train::TrainerCallbacks callbacks;
  callbacks.on_log = [&](const nlohmann::ordered_json& entry) {
    entries += 1;
    if (!fs::exists(state_file)) {
      problems.push_back("no trainer_state.json at log entry " + std::to_string(entries));
      return;
    }
    const auto state = util::read_json_file(state_file);
    if (state["log_history"].size() != entries || state["log_history"].back() != nlohmann::json(entry)) {
      problems.push_back("trainer_state.json lags behind log entry " + entry.dump());
    }
    if (entry.contains("step") && !entry.contains("train_runtime") &&
        state["global_step"] != nlohmann::json(entry["step"])) {
      problems.push_back("global_step " + state["global_step"].dump() + " at entry " + entry.dump());
    }
    if (state["max_steps"] != 4) problems.push_back("max_steps " + state["max_steps"].dump());
  };
  callbacks.on_message = [&](const std::string& message) {
    if (message.rfind("saved ", 0) != 0) return;
    const auto state = util::read_json_file(state_file);
    const auto checkpoint_state = util::read_json_file(fs::path(message.substr(6)) / "trainer_state.json");
    if (state["log_history"] != checkpoint_state["log_history"]) {
      problems.push_back("output_dir's trainer_state.json differs from the checkpoint's at " + message);
    }
  };
  train::Trainer trainer(args, std::move(inputs), callbacks);
  trainer.train();
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(entries, 4u + 2u + 1u);  // 4 training logs, 2 evaluations, the run's summary
  // No temporary file is left beside it.
  for (const auto& entry : fs::directory_iterator(dir / "out")) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

}  // namespace
}  // namespace fitsum::test
