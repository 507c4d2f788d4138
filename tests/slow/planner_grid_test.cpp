// The planner's full accuracy grid (label slow): four models (two small vocabularies, the real 96103-token one, and
// pegasus-large's widths at a reduced depth) x micro-batch x source length x checkpointing (none, all, a partial
// set) x optimizer; every predicted peak within 10% of the peak measured by training two steps, and none below it
// by more than the planner's margin (an under-prediction beyond it would let a plan run out of memory). Prints the
// table (docs/memory.md quotes it).
#include <gtest/gtest.h>

#include "planner_grid.h"

namespace fitsum::test {
namespace {

TEST(PlannerGrid, EveryCellWithinTenPercentAndNoneUnderTheMargin) {
  std::vector<GridCell> cells;
  const GridCheckpointing partial{1, 2};
  for (const auto& m : {grid_model_small(), grid_model_bart_small(), grid_model_t5_small(), grid_model_flan_t5_small(),
                        grid_model_large(), grid_model_real_vocab()}) {
    run_grid(m, {1, 2, 4, 8}, {128, 512}, 64, {kNone, partial, kEvery},
             {optim::OptimizerType::adamw_torch, optim::OptimizerType::adafactor}, cells);
  }
  run_grid(grid_model_large_shaped(), {1, 4}, {512}, 128, {kNone, partial, kEvery}, {optim::OptimizerType::adafactor},
           cells);
  print_grid(cells);
  ASSERT_EQ(cells.size(), 6u * 48u + 6u);
  double worst = 0.0;
  for (const auto& c : cells) {
    worst = std::max(worst, std::abs(c.error()));
    EXPECT_LE(std::abs(c.error()), 0.10) << c.model << " micro-batch " << c.knobs.micro_batch << " source " << c.source
                                         << " checkpointed " << c.knobs.encoder_checkpointed << "+"
                                         << c.knobs.decoder_checkpointed << " " << optim::to_string(c.knobs.optimizer);
    EXPECT_GE(c.error(), -memory::kPlanMargin) << c.model << " micro-batch " << c.knobs.micro_batch << " source "
                                               << c.source << ": under-predicted beyond the margin";
  }
  std::printf("worst |error| %.2f%%\n", 100.0 * worst);
}

// The long-input encoders at 2048 source tokens (the cells at 4096 and 16384 are below): four encoder layers, so the full depth mixes PEGASUS-X's plain and staggered
// layers, of which the 1 + 1 probe copy has only the plain and the 2 + 2 one adds a staggered one; LongT5's later
// blocks take the first block's position bias. Bottom-checkpointed sets leave plain layers above checkpointed ones
// (the `_mixed` terms: LongT5's bias gradient).
TEST(PlannerGrid, LongInputEncodersAt2048SourceTokensWithinTenPercent) {
  std::vector<GridCell> cells;
  for (const auto& m : {grid_model_pegasus_x_small(), grid_model_long_t5_small()}) {
    run_grid(m, {1}, {2048}, 32, {kNone, GridCheckpointing{2, 1}, kEvery}, {optim::OptimizerType::adafactor}, cells);
  }
  print_grid(cells);
  ASSERT_EQ(cells.size(), 6u);
  for (const auto& c : cells) {
    EXPECT_LE(std::abs(c.error()), 0.10) << c.model << " checkpointed " << c.knobs.encoder_checkpointed << "+"
                                         << c.knobs.decoder_checkpointed;
    EXPECT_GE(c.error(), -memory::kPlanMargin) << c.model << ": under-predicted beyond the margin";
  }
}

// The long-input encoders at 4096 and 16384 source tokens (bench/results/2026-12-06-planner-long-inputs-16k.md lists
// every cell): PEGASUS-X (staggered block-local attention with global tokens) and LongT5 (transient-global), at
// reduced widths (d_model 128) and four encoder layers, x micro-batch x checkpointing (none, bottom 2 + 1, all) x
// optimizer.
TEST(PlannerGrid, LongInputEncodersAt4096And16384SourceTokens) {
  std::vector<GridCell> cells;
  for (const auto& m : {grid_model_pegasus_x_small(), grid_model_long_t5_small()}) {
    run_grid(m, {1, 2}, {4096, 16384}, 128, {kNone, GridCheckpointing{2, 1}, kEvery},
             {optim::OptimizerType::adamw_torch, optim::OptimizerType::adafactor}, cells);
  }
  print_grid(cells);
  ASSERT_EQ(cells.size(), 2u * 24u);
  for (const auto& c : cells) {
    EXPECT_LE(std::abs(c.error()), 0.10) << c.model << " micro-batch " << c.knobs.micro_batch << " source " << c.source
                                         << " checkpointed " << c.knobs.encoder_checkpointed << "+"
                                         << c.knobs.decoder_checkpointed << " " << optim::to_string(c.knobs.optimizer);
    EXPECT_GE(c.error(), -memory::kPlanMargin) << c.model << " micro-batch " << c.knobs.micro_batch << " source "
                                               << c.source << ": under-predicted beyond the margin";
  }
}

// The extrapolation from the 1 + 1 and 2 + 2 layer probes to full depth, at pegasus-large's size (568M parameters,
// 16 + 16 layers): one model, trained for real at 512 / 128 tokens (two optimizer steps each), against the
// prediction. About 10 GB of memory and a few minutes on 2 cores.
TEST(PlannerGrid, PegasusLargeAtFullDepthWithinTenPercent) {
  const GridModel large{"pegasus-large",
                        "vocab_size=96103,d_model=1024,encoder_layers=16,decoder_layers=16,encoder_ffn_dim=4096,"
                        "decoder_ffn_dim=4096,encoder_attention_heads=16,decoder_attention_heads=16"};
  std::vector<GridCell> cells;
  run_grid(large, {1}, {512}, 128, {kNone, GridCheckpointing{8, 4}, kEvery}, {optim::OptimizerType::adafactor}, cells);
  print_grid(cells);
  ASSERT_EQ(cells.size(), 3u);
  for (const auto& c : cells) {
    EXPECT_LE(std::abs(c.error()), 0.10) << "checkpointed " << c.knobs.encoder_checkpointed << "+"
                                         << c.knobs.decoder_checkpointed;
    EXPECT_GE(c.error(), -memory::kPlanMargin);
  }
}

}  // namespace
}  // namespace fitsum::test
