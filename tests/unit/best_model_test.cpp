// HF's best-model rules: a new best, EarlyStoppingCallback's improvement test, and save_total_limit's rotation
// that never removes the best checkpoint (Trainer._sorted_checkpoints / _rotate_checkpoints).
#include <gtest/gtest.h>

#include "fitsum/train/best_model.h"
#include "fitsum/train/training_arguments.h"

namespace fitsum::test {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> folders(std::initializer_list<int> steps) {
  std::vector<fs::path> out;
  for (int s : steps) out.push_back(fs::path("out") / ("checkpoint-" + std::to_string(s)));
  return out;
}

TEST(BestModel, NewBestFollowsGreaterIsBetter) {
  EXPECT_TRUE(train::is_new_best(2.0, std::nullopt, false));
  EXPECT_TRUE(train::is_new_best(1.0, 2.0, false));
  EXPECT_FALSE(train::is_new_best(2.0, 2.0, false));  // equal is not better
  EXPECT_FALSE(train::is_new_best(3.0, 2.0, false));
  EXPECT_TRUE(train::is_new_best(3.0, 2.0, true));
  EXPECT_FALSE(train::is_new_best(1.0, 2.0, true));
}

TEST(BestModel, EarlyStoppingNeedsMoreThanTheThreshold) {
  EXPECT_TRUE(train::improves_for_early_stopping(1.0, std::nullopt, false, 0.5));
  EXPECT_TRUE(train::improves_for_early_stopping(1.0, 2.0, false, 0.5));
  EXPECT_FALSE(train::improves_for_early_stopping(1.6, 2.0, false, 0.5));  // better, by less than the threshold
  EXPECT_FALSE(train::improves_for_early_stopping(1.5, 2.0, false, 0.5));  // exactly the threshold: not more
  EXPECT_TRUE(train::improves_for_early_stopping(40.0, 30.0, true, 5.0));
  EXPECT_FALSE(train::improves_for_early_stopping(20.0, 30.0, true, 0.0));
}

TEST(BestModel, RotationRemovesTheOldestButNeverTheBest) {
  // No best: the oldest go.
  EXPECT_EQ(train::checkpoints_to_remove(folders({2, 4, 6}), {}, 2), folders({2}));
  EXPECT_TRUE(train::checkpoints_to_remove(folders({2, 4}), {}, 2).empty());
  // The best is the oldest: it moves to the second-newest place, the next-oldest go instead.
  const auto best = fs::path("out") / "checkpoint-2";
  EXPECT_EQ(train::checkpoints_to_remove(folders({2, 4, 6, 8}), best, 2), folders({4, 6}));
  // A limit of 1 keeps 2 while the best is not the newest.
  EXPECT_EQ(train::checkpoints_to_remove(folders({2, 4, 6}), best, 1), folders({4}));
  // ... and 1 when it is.
  EXPECT_EQ(train::checkpoints_to_remove(folders({2, 4, 6}), fs::path("out") / "checkpoint-6", 1), folders({2, 4}));
}

TEST(BestModel, MetricNamesAndDirectionAsHfResolvesThem) {
  train::TrainingArguments args;
  EXPECT_EQ(args.best_metric_key(), "");  // nothing tracked
  args.load_best_model_at_end = true;
  EXPECT_EQ(args.best_metric_key(), "eval_loss");
  EXPECT_FALSE(args.best_metric_greater_is_better());
  args.metric_for_best_model = "rouge1";
  EXPECT_EQ(args.best_metric_key(), "eval_rouge1");
  EXPECT_TRUE(args.best_metric_greater_is_better());
  args.metric_for_best_model = "eval_rougeL";
  EXPECT_EQ(args.best_metric_key(), "eval_rougeL");
  args.greater_is_better = false;
  EXPECT_FALSE(args.best_metric_greater_is_better());
}

TEST(BestModel, InconsistentSettingsAreRefusedWithTheRule) {
  train::TrainingArguments args;
  args.output_dir = "out";
  args.load_best_model_at_end = true;
  args.eval_strategy = train::IntervalStrategy::steps;
  args.eval_steps = 3;
  args.save_steps = 4;
  try {
    args.validate();
    FAIL() << "save_steps 4 is no multiple of eval_steps 3";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("round multiple of eval_steps"), std::string::npos) << e.what();
  }
  args.save_steps = 6;
  EXPECT_NO_THROW(args.validate());
  args.save_strategy = train::IntervalStrategy::epoch;
  EXPECT_THROW(args.validate(), std::invalid_argument);
  args.save_strategy = train::IntervalStrategy::steps;
  args.metric_for_best_model = "rouge2";
  EXPECT_THROW(args.validate(), std::invalid_argument);  // ROUGE needs predict_with_generate
  args.predict_with_generate = true;
  EXPECT_NO_THROW(args.validate());
  train::TrainingArguments early;
  early.output_dir = "out";
  early.early_stopping_patience = 2;
  EXPECT_THROW(early.validate(), std::invalid_argument);  // needs load_best_model_at_end
}

// HF finds an unknown metric_for_best_model only in the first evaluation's metrics (a KeyError after the steps
// before it); fitsum refuses it in validate(), naming the metrics an evaluation reports.
TEST(BestModel, AMetricNoEvaluationReportsIsRefusedWithTheValidNames) {
  train::TrainingArguments args;
  args.output_dir = "out";
  args.predict_with_generate = true;
  for (const char* name : {"loss", "eval_loss", "rouge1", "rouge2", "rougeL", "eval_rougeLsum", "gen_len",
                           "eval_gen_len", "runtime", "samples_per_second"}) {
    args.metric_for_best_model = name;
    EXPECT_NO_THROW(args.validate()) << name;
  }
  for (const char* name : {"bleu", "rougel", "eval_rouge", "eval_", "accuracy", "Loss"}) {
    args.metric_for_best_model = name;
    try {
      args.validate();
      ADD_FAILURE() << name << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "metric_for_best_model '" + std::string(name) +
                                           "' is not a metric the evaluation reports; choose one of loss, rouge1, "
                                           "rouge2, rougeL, rougeLsum, gen_len, runtime, samples_per_second (with "
                                           "or without the eval_ prefix)");
    }
  }
}

TEST(BestModel, GenerationSettingsGenerateRefusesAreRefusedInValidate) {
  train::TrainingArguments args;
  args.output_dir = "out";
  args.generation_num_beams = 0;
  EXPECT_THROW(args.validate(), std::invalid_argument);
  args.generation_num_beams = 1;
  EXPECT_NO_THROW(args.validate());
  args.generation_max_length = 1;  // generate() refuses a max_length the decoder start token already fills
  EXPECT_THROW(args.validate(), std::invalid_argument);
  args.generation_max_length = 2;
  EXPECT_NO_THROW(args.validate());
}

}  // namespace
}  // namespace fitsum::test
