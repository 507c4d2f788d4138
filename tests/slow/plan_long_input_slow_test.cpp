// pegasus-x-large at full depth and width (568M parameters, 16 + 16 layers) planned and trained at 16384 source and
// 256 summary tokens under 8 GiB (label slow: two optimizer steps at 16384 tokens take many minutes on two cores).
#include <gtest/gtest.h>

#include "plan_long_input.h"

namespace fitsum::test {
namespace {

TEST(PlanLongInputSlow, PegasusXLargeAt16384TokensTrainsUnder8GiB) {
  const auto dir = temp_dir("plan-long-input-large");
  LongInputRun run;
  run.budget_mib = 8192;
  const auto chosen = plan_and_train_long_input(dir, run);
  ASSERT_TRUE(chosen.is_object());
  std::printf("chosen: %s\n", chosen.dump().c_str());
}

}  // namespace
}  // namespace fitsum::test
