// `fitsum plan` and `fitsum train --max_memory` for PEGASUS-X at 16384 source and 256 summary tokens, as users run
// them: pegasus-x-large's config (configs/pegasus-x-large: blocks of 512, 128 global tokens, staggered layers) at a
// reduced depth and width (2 + 2 layers, d_model 128), so that the probe and two training steps at 16384 tokens take
// about a minute on two cores. The plan must fit the budget with the planner's margin, and two steps trained with it
// must peak under the budget and within 10% of the prediction (tests/support/plan_long_input.h). Full depth and width
// under 8 GiB: tests/slow/plan_long_input_slow_test.cpp.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "plan_long_input.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

TEST(PlanLongInput, PegasusXAt16384TokensChoosesAPlanAndTrainsUnderTheBudget) {
  const auto dir = temp_dir("plan-long-input");
  LongInputRun run;
  run.overrides = "encoder_layers=2,decoder_layers=2,d_model=128,encoder_ffn_dim=512,decoder_ffn_dim=512,"
                  "encoder_attention_heads=4,decoder_attention_heads=4,vocab_size=8000";
  run.budget_mib = 1024;
  const auto chosen = plan_and_train_long_input(dir, run);
  ASSERT_TRUE(chosen.is_object());
  // Without checkpointing micro-batch 2 is predicted at ~1.6 GiB here (the attention probabilities of 4 heads x 16896
  // positions x 640 keys are 165 MiB a layer): the plan must recompute or split the batch.
  EXPECT_TRUE(chosen["gradient_checkpointing_encoder_layers"].get<int>() > 0 ||
              chosen["per_device_train_batch_size"].get<int>() < 2)
      << chosen.dump();
}

}  // namespace
}  // namespace fitsum::test
