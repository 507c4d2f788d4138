// The planner's full accuracy grid (label slow): two model sizes x micro-batch {1, 2, 4, 8} x source length
// {128, 512} x checkpointing {off, all} x optimizer {adamw_torch, adafactor}; every predicted peak within 10% of
// the peak measured by training two steps. Prints the table (docs/memory.md quotes it).
#include <gtest/gtest.h>

#include "planner_grid.h"

namespace fitsum::test {
namespace {

TEST(PlannerGrid, EveryCellWithinTenPercent) {
  std::vector<GridCell> cells;
  for (const auto& m : {grid_model_small(), grid_model_large()}) {
    run_grid(m, {1, 2, 4, 8}, {128, 512}, 64, {false, true},
             {optim::OptimizerType::adamw_torch, optim::OptimizerType::adafactor}, cells);
  }
  print_grid(cells);
  ASSERT_EQ(cells.size(), 64u);
  double worst = 0.0;
  for (const auto& c : cells) {
    worst = std::max(worst, std::abs(c.error()));
    EXPECT_LE(std::abs(c.error()), 0.10) << c.model << " micro-batch " << c.knobs.micro_batch << " source " << c.source
                                         << " checkpointing " << c.knobs.checkpointed_layers << " "
                                         << optim::to_string(c.knobs.optimizer);
  }
  std::printf("worst |error| %.2f%%\n", 100.0 * worst);
}

}  // namespace
}  // namespace fitsum::test
