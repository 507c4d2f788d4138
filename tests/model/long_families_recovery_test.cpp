// Out-of-memory recovery on the long-document encoders (PEGASUS-X's block-local attention with global tokens, LongT5's
// local and transient-global attention): a micro-batch that runs out of memory in its forward (the allocator's limit
// lowered after the first step) or in the middle of its backward (raised from a gradient hook, once) is split and the
// step carries on with the same examples: the losses and weights of the run that never ran out.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/io/hf_config.h"
#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/train/trainer.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

struct LongConfig {
  std::string name;
  std::string json;
};

std::ostream& operator<<(std::ostream& out, const LongConfig& c) { return out << c.name; }

std::vector<LongConfig> long_configs() {
  const std::string long_t5 =
      R"({"model_type": "longt5", "vocab_size": 211, "d_model": 32, "d_kv": 8, "d_ff": 48, "num_layers": 2,
          "num_decoder_layers": 2, "num_heads": 4, "relative_attention_num_buckets": 8,
          "relative_attention_max_distance": 20, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": false,
          "local_radius": 5, "global_block_size": 4, "dropout_rate": 0.0, "eos_token_id": 1,
          "decoder_start_token_id": 0, "encoder_attention_type": )";
  return {{"pegasus_x",
           R"({"model_type": "pegasus_x", "vocab_size": 211, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
               "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 48,
               "decoder_ffn_dim": 48, "block_size": 8, "num_global_tokens": 3, "stagger_local_blocks": true,
               "dropout": 0.0, "eos_token_id": 1, "decoder_start_token_id": 0})"},
          {"longt5_local", long_t5 + R"("local"})"},
          {"longt5_tglobal", long_t5 + R"("transient-global"})"}};
}

// Example i: 61 + 9 i source tokens (none a multiple of a block), 17 + 3 i labels, ids from the example's number.
data::Example example(int i) {
  data::Example e;
  for (int t = 0; t < 61 + 9 * (i % 4); ++t) e.input_ids.push_back(3 + (i * 37 + t * 11) % 200);
  e.input_ids.back() = 1;
  std::vector<data::TokenId> labels;
  for (int t = 0; t < 17 + 3 * (i % 4); ++t) labels.push_back(3 + (i * 13 + t * 7) % 200);
  labels.back() = 1;
  e.labels = labels;
  return e;
}

struct LimitReset {
  ~LimitReset() { memory::TrackingCpuAllocator::instance().set_limit(0); }
};

struct Run {
  std::vector<double> losses;
  std::string messages;
  std::int64_t peak = 0;
  std::int64_t oom_splits = 0;
  std::vector<torch::Tensor> weights;
};

// Three steps of micro-batch `micro` x `accumulation` (Adafactor) from the same random init. After the first step the
// allocator's limit is lowered to `limit_after_first_step` bytes above its count at the start (when > 0), or the
// first encoder weight's gradient hook raises an out-of-memory error once (`fail_one_backward`).
Run train_three_steps(const LongConfig& c, std::int64_t micro, std::int64_t accumulation,
                      std::int64_t limit_after_first_step, bool fail_one_backward = false) {
  auto& allocator = memory::TrackingCpuAllocator::instance();
  const auto baseline = allocator.current_bytes();
  model::Seq2SeqLM model(io::model_config_from_hf(nlohmann::json::parse(c.json), c.name));
  model::init_weights(*model, 5);
  train::TrainingArguments args;
  args.output_dir = temp_dir("long-oom-" + c.name).string();
  args.overwrite_output_dir = true;
  args.max_steps = 3;
  args.logging_steps = 1;
  args.save_strategy = train::IntervalStrategy::no;
  args.optim = optim::OptimizerType::adafactor;
  args.per_device_train_batch_size = micro;
  args.gradient_accumulation_steps = accumulation;
  train::TrainerInputs inputs;
  inputs.model = model;
  for (int i = 0; i < 12; ++i) inputs.train_examples.push_back(example(i));
  Run run;
  train::TrainerCallbacks callbacks;
  callbacks.on_log = [&](const nlohmann::ordered_json& entry) {
    if (entry.contains("loss")) run.losses.push_back(entry["loss"].get<double>());
    if (entry.contains("peak_memory_bytes")) {
      run.peak = std::max(run.peak, entry["peak_memory_bytes"].get<std::int64_t>() - baseline);
    }
    if (entry.contains("oom_splits")) run.oom_splits += entry["oom_splits"].get<std::int64_t>();
  };
  callbacks.on_message = [&](const std::string& m) { run.messages += m + "\n"; };
  auto armed = std::make_shared<bool>(false);
  if (fail_one_backward) {
    for (const auto& p : model->named_parameters()) {
      if (p.key().find("encoder") == std::string::npos || p.value().dim() != 2) continue;
      p.value().register_hook([armed](const torch::Tensor& grad) {
        if (*armed) {
          *armed = false;
          TORCH_CHECK_WITH(OutOfMemoryError, false, "injected: out of memory during backward");
        }
        return grad;
      });
      break;
    }
  }
  callbacks.on_step = [&](std::int64_t step, std::int64_t) {
    if (step == 1 && limit_after_first_step > 0) allocator.set_limit(baseline + limit_after_first_step);
    if (step == 1 && fail_one_backward) *armed = true;
  };
  LimitReset reset;
  train::Trainer trainer(args, std::move(inputs), callbacks);
  EXPECT_EQ(trainer.train().global_step, 3);
  allocator.set_limit(0);
  for (const auto& p : model->parameters()) run.weights.push_back(p.detach().clone());
  return run;
}

void expect_same_run(const Run& got, const Run& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << got.messages;
  for (std::size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_CLOSE(got.losses[i], want.losses[i], relative(1e-6)) << "step " << i + 1;
  }
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (std::size_t i = 0; i < want.weights.size(); ++i) {
    EXPECT_CLOSE(got.weights[i], want.weights[i], relative(1e-4)) << "parameter " << i;
  }
}

class LongFamiliesRecovery : public ::testing::TestWithParam<LongConfig> {};

TEST_P(LongFamiliesRecovery, OutOfMemoryInTheForwardSplitsTheMicroBatchAndKeepsTheUpdate) {
  const auto whole = train_three_steps(GetParam(), 4, 1, 0);
  const auto halves = train_three_steps(GetParam(), 2, 2, 0);
  ASSERT_LT(halves.peak, whole.peak);
  // Between the two: micro-batch 4 no longer fits, micro-batch 2 does.
  const auto recovered = train_three_steps(GetParam(), 4, 1, (whole.peak + halves.peak) / 2);
  EXPECT_NE(recovered.messages.find("split into 2 + 2"), std::string::npos) << recovered.messages;
  EXPECT_GE(recovered.oom_splits, 1) << recovered.messages;
  expect_same_run(recovered, whole);
}

TEST_P(LongFamiliesRecovery, OutOfMemoryInTheBackwardRedoesTheStepWithSplitMicroBatches) {
  const auto whole = train_three_steps(GetParam(), 4, 1, 0);
  const auto recovered = train_three_steps(GetParam(), 4, 1, 0, /*fail_one_backward=*/true);
  EXPECT_NE(recovered.messages.find("out of memory in the backward of a micro-batch of 4 examples at step 2: split "
                                    "into 2 + 2, redoing the step"),
            std::string::npos)
      << recovered.messages;
  EXPECT_EQ(recovered.oom_splits, 1);
  expect_same_run(recovered, whole);
}

INSTANTIATE_TEST_SUITE_P(Families, LongFamiliesRecovery, ::testing::ValuesIn(long_configs()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fitsum::test
