// A run that starts does not die later for a reason it could know at step 0: evaluation and prediction settings,
// generation options, metric names and the evaluation files are checked before the first training step (a one-line
// error, nothing trained, no checkpoint), and what generate() only warns about is warned about once and done as HF
// does it. Also the end-of-run files that depend on the evaluations: the model card's results table and total_flos.
#include <fstream>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "saved_runs.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

// stas/pegasus-cnn_dailymail-tiny-random: its generation_config.json sets min_length 32 and num_beams 8.
fs::path pegasus_tiny() { return shared_dir() / "data" / "pegasus-tiny"; }
fs::path samsum(const char* split) { return source_dir() / "data" / "samsum" / (std::string(split) + ".jsonl"); }
fs::path tiny_fixture() { return shared_dir() / "fixtures" / "tiny-pegasus"; }

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// A short run of the tiny PEGASUS on a few SAMSum records.
std::string train_command(const fs::path& out, const std::string& flags) {
  return fitsum_binary().string() + " train --model_name_or_path " + quoted(pegasus_tiny()) + " --train_file " +
         quoted(samsum("train")) + " --output_dir " + quoted(out) +
         " --max_train_samples 4 --max_eval_samples 2 --max_source_length 32 --max_target_length 16 "
         "--per_device_train_batch_size 2 --per_device_eval_batch_size 2 --disable_tqdm " +
         flags;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

bool has_checkpoint(const fs::path& out) {
  if (!fs::exists(out)) return false;
  for (const auto& entry : fs::directory_iterator(out)) {
    if (entry.path().filename().string().rfind("checkpoint-", 0) == 0) return true;
  }
  return false;
}

// Refused before the first training step: exit `status`, one error line holding `message`, no step logged, nothing
// saved.
void expect_refused_at_step_zero(const CommandResult& r, const fs::path& out, int status, const std::string& message) {
  EXPECT_EQ(r.exit_code, status) << r.output;
  EXPECT_EQ(count(r.output, "fitsum: error: "), 1u) << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  std::smatch line;
  ASSERT_TRUE(std::regex_search(r.output, line, std::regex("fitsum: error: [^\n]*"))) << r.output;
  EXPECT_NE(line.str().find(message), std::string::npos) << "not on the error line: " << r.output;
  EXPECT_EQ(r.output.find("\"step\""), std::string::npos) << "a step ran: " << r.output;
  EXPECT_EQ(r.output.find("training:"), std::string::npos) << "training started: " << r.output;
  EXPECT_FALSE(has_checkpoint(out));
  EXPECT_FALSE(fs::exists(out / "trainer_state.json"));
}

void write_lines(const fs::path& file, const std::vector<nlohmann::json>& records) {
  std::ofstream out(file);
  for (const auto& r : records) out << r.dump() << "\n";
}

TEST(StepZero, MinLengthAboveMaxLengthWarnsOnceAndGeneratesToMaxLengthAsHuggingFace) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("min-length");
  const auto out = dir / "out";
  // The model's generation_config.json asks for min_length 32; generation_max_length 20 cannot meet it. HF's
  // generate() warns ("Unfeasible length constraints") and bans eos until max_length, where the forced eos ends
  // every sequence: 19 tokens after the start token.
  const auto r = run_command(train_command(out, "--validation_file " + quoted(samsum("validation")) +
                                                    " --max_steps 2 --eval_strategy steps --eval_steps 1 --do_eval "
                                                    "--predict_with_generate --generation_max_length 20 "
                                                    "--generation_num_beams 1 --save_strategy no --logging_steps 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output,
                  "Unfeasible length constraints: min_length (32) is larger than the maximum possible "
                  "length (20)"),
            1u)
      << r.output;
  std::vector<nlohmann::json> evaluations;
  for (const auto& e : log_history(out)) {
    if (!e.contains("eval_gen_len")) continue;
    evaluations.push_back(e);
    EXPECT_EQ(e["eval_gen_len"].get<double>(), 19.0) << e.dump();
  }
  ASSERT_EQ(evaluations.size(), 3u);  // steps 1 and 2, and do_eval's
  // do_eval at the step of the last evaluation during training is the same evaluation: the same numbers.
  for (const char* key : {"eval_loss", "eval_rouge1", "eval_rougeL", "eval_gen_len"}) {
    EXPECT_EQ(evaluations[2][key], evaluations[1][key]) << key;
  }
}

TEST(StepZero, GenerationSettingsGenerateRefusesAreUsageErrorsBeforeTheFirstStep) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("generation-settings");
  const std::string evaluate = "--validation_file " + quoted(samsum("validation")) +
                               " --max_steps 2 --eval_strategy steps --eval_steps 1 --predict_with_generate ";
  auto out = dir / "beams";
  auto r = run_command(train_command(out, evaluate + "--generation_num_beams 0"));
  expect_refused_at_step_zero(r, out, 2, "generation_num_beams must be at least 1");
  out = dir / "length";
  r = run_command(train_command(out, evaluate + "--generation_max_length 1"));
  expect_refused_at_step_zero(r, out, 2, "generation_max_length must be at least 2");
  // Known only with the model: more decoder positions than the tiny fixture's 64, and more beams than its vocabulary
  // of 167 can rank.
  const auto data = write_copy_task_records(dir / "copy.jsonl");
  const std::string fixture_run = fitsum_binary().string() + " train --model_name_or_path " + quoted(tiny_fixture()) +
                                  " --train_file " + quoted(data) + " --validation_file " + quoted(data) +
                                  " --max_steps 2 --eval_strategy steps --eval_steps 1 --predict_with_generate ";
  out = dir / "positions";
  r = run_command(fixture_run + "--output_dir " + quoted(out) + " --generation_max_length 100");
  expect_refused_at_step_zero(r, out, 2, "max_length (100) needs 99 decoder positions");
  out = dir / "many-beams";
  r = run_command(fixture_run + "--output_dir " + quoted(out) + " --generation_num_beams 100");
  expect_refused_at_step_zero(r, out, 2, "num_beams (100) is too large");
}

TEST(StepZero, MetricForBestModelMustBeOneTheEvaluationReports) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("best-metric");
  const std::string evaluate = "--validation_file " + quoted(samsum("validation")) +
                               " --max_steps 2 --eval_strategy steps --eval_steps 1 --save_steps 1 ";
  auto out = dir / "bleu";
  auto r = run_command(train_command(out, evaluate + "--predict_with_generate --metric_for_best_model bleu"));
  expect_refused_at_step_zero(r, out, 2, "metric_for_best_model 'bleu' is not a metric the evaluation reports");
  for (const char* name : {"loss", "rouge1", "rouge2", "rougeL", "rougeLsum", "gen_len"}) {
    EXPECT_NE(r.output.find(name), std::string::npos) << name << " not listed: " << r.output;
  }
  out = dir / "case";
  r = run_command(train_command(out, evaluate + "--predict_with_generate --metric_for_best_model eval_rougel"));
  expect_refused_at_step_zero(r, out, 2, "metric_for_best_model 'eval_rougel' is not a metric");
  // The evaluation of a validation file without summaries reports no loss.
  const auto unlabelled = dir / "unlabelled.jsonl";
  write_lines(unlabelled, {{{"dialogue", "A: hi"}}, {{"dialogue", "B: hello there"}}});
  out = dir / "no-labels";
  r = run_command(train_command(out, "--validation_file " + quoted(unlabelled) +
                                         " --max_steps 2 --eval_strategy steps --eval_steps 1 --save_steps 1 "
                                         "--metric_for_best_model loss"));
  expect_refused_at_step_zero(r, out, 2, "metric_for_best_model is 'eval_loss', which this run's evaluation does not");
  // With the prefix, as HF accepts it: the run trains and tracks it.
  out = dir / "prefixed";
  r = run_command(train_command(out, evaluate + "--metric_for_best_model eval_loss"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(util::read_json_file(out / "trainer_state.json")["best_metric"].is_null());
}

TEST(StepZero, EmptyOrMissingEvaluationFilesAreRefusedBeforeTraining) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("empty-splits");
  const auto empty = dir / "empty.jsonl";
  write_lines(empty, {});
  auto out = dir / "eval-strategy";
  auto r = run_command(
      train_command(out, "--validation_file " + quoted(empty) + " --max_steps 2 --eval_strategy steps --eval_steps 1"));
  expect_refused_at_step_zero(r, out, 2, "validation_file '" + empty.string() + "' has no examples to evaluate");
  out = dir / "do-eval";
  r = run_command(train_command(out, "--validation_file " + quoted(empty) + " --max_steps 1 --do_eval"));
  expect_refused_at_step_zero(r, out, 2, "validation_file '" + empty.string() + "' has no examples");
  out = dir / "do-predict";
  r = run_command(train_command(out, "--test_file " + quoted(empty) + " --max_steps 1 --do_predict"));
  expect_refused_at_step_zero(r, out, 2, "test_file '" + empty.string() + "' has no examples");
  // Every record skipped as malformed leaves none either.
  const auto bad = dir / "bad.jsonl";
  write_lines(bad, {{{"text", "no dialogue field"}}});
  out = dir / "all-skipped";
  r = run_command(
      train_command(out, "--validation_file " + quoted(bad) + " --skip_bad_records --max_steps 1 --do_eval"));
  expect_refused_at_step_zero(r, out, 2, "has no examples to evaluate");
  // A file that is given must be readable, whether or not an evaluation reads it.
  out = dir / "missing";
  r = run_command(train_command(out, "--validation_file " + quoted(dir / "missing.jsonl") + " --max_steps 1"));
  expect_refused_at_step_zero(
      r, out, 1, "cannot read validation_file '" + (dir / "missing.jsonl").string() + "': it does not exist");
  // fitsum eval: the same, before generating.
  r = run_command(fitsum_binary().string() + " eval --model " + quoted(pegasus_tiny()) + " --test_file " +
                  quoted(empty) + " --disable_tqdm");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("test_file '" + empty.string() + "' has no examples to evaluate"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("eval_samples"), std::string::npos) << r.output;
}

TEST(StepZero, EvalDecodesLabelsPaddedWithIgnoreIndexAsRunSummarization) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("label-padding");
  // Pre-tokenized as datasets' map(tokenizer) with padding="max_length" and the -100 of run_summarization's
  // ignore_pad_token_for_loss: the same labels with and without the padding.
  std::vector<nlohmann::json> plain, padded;
  for (int i = 0; i < 3; ++i) {
    nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
    for (int j = 0; j < 6 + i; ++j) ids.push_back(200 + 37 * i + 11 * j);
    ids.push_back(1);
    for (int j = 0; j < 3 + i; ++j) labels.push_back(300 + 53 * i + 7 * j);
    labels.push_back(1);
    plain.push_back({{"id", i}, {"input_ids", ids}, {"labels", labels}});
    while (labels.size() < 8) labels.push_back(-100);
    padded.push_back({{"id", i}, {"input_ids", ids}, {"labels", labels}});
  }
  write_lines(dir / "plain.jsonl", plain);
  write_lines(dir / "padded.jsonl", padded);
  const auto eval = [&](const char* name) {
    const auto predictions = dir / (std::string(name) + "-predictions.jsonl");
    const auto r = run_command(fitsum_binary().string() + " eval --model " + quoted(pegasus_tiny()) + " --test_file " +
                               quoted(dir / (std::string(name) + ".jsonl")) +
                               " --num_beams 1 --max_length 8 --min_length 0 --disable_tqdm --predictions_file " +
                               quoted(predictions) + " --metrics_file " + quoted(dir / (std::string(name) + ".json")));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::vector<std::string> references;
    std::ifstream in(predictions);
    for (std::string line; std::getline(in, line);) references.push_back(nlohmann::json::parse(line)["reference"]);
    return references;
  };
  const auto expected = eval("plain");
  const auto got = eval("padded");
  ASSERT_EQ(expected.size(), 3u);
  EXPECT_EQ(got, expected);
  const auto a = util::read_json_file(dir / "plain.json"), b = util::read_json_file(dir / "padded.json");
  for (const char* key : {"eval_loss", "eval_rouge1", "eval_rougeL", "eval_gen_len"}) {
    EXPECT_EQ(b[key], a[key]) << key;  // -100 is ignored by the loss and decoded as padding for ROUGE
  }
}

TEST(StepZero, ModelCardListsAnEvaluationOnceAndTotalFlosCountsHuggingFacesWay) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("model-card");
  const auto data = write_copy_task_records(dir / "copy.jsonl");
  const auto run = [&](const fs::path& out, const std::string& flags) {
    return run_command(fitsum_binary().string() + " train --model_name_or_path " + quoted(tiny_fixture()) +
                       " --train_file " + quoted(data) + " --validation_file " + quoted(data) + " --output_dir " +
                       quoted(out) + " --per_device_train_batch_size 8 --disable_tqdm " + flags);
  };
  const auto out = dir / "out";
  auto r = run(out, "--max_steps 2 --eval_strategy steps --eval_steps 2 --do_eval --save_strategy no");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // HF's card: one row per evaluation during training; do_eval's result is reported above the table.
  const auto card = util::read_file(out / "README.md");
  const auto table = card.substr(card.find("### Training results"));
  EXPECT_EQ(count(table, "\n| "), 2u) << card;  // the header and the evaluation at step 2
  // HF's total_flos: 6 x input_ids.numel() (padding counted) x non-embedding parameters, per micro-batch. The eight
  // copy-task records in one batch pad to 12 input tokens; the fixture has 40800 parameters outside its embeddings.
  const double step_flos = 6.0 * 8 * 12 * 40800;
  const auto state = util::read_json_file(out / "trainer_state.json");
  EXPECT_EQ(state["total_flos"].get<double>(), 2 * step_flos);
  nlohmann::json summary;
  for (const auto& e : state["log_history"]) {
    if (e.contains("train_runtime")) summary = e;
  }
  EXPECT_EQ(summary["total_flos"].get<double>(), 2 * step_flos);
  EXPECT_EQ(util::read_json_file(out / "train_results.json")["total_flos"].get<double>(), 2 * step_flos);
  // Kept across a resume: one step, then the second from its checkpoint.
  const auto resumed = dir / "resumed";
  r = run(resumed, "--max_steps 1 --save_steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(util::read_json_file(resumed / "checkpoint-1" / "trainer_state.json")["total_flos"].get<double>(),
            step_flos);
  r = run(resumed, "--max_steps 2 --save_steps 1 --resume_from_checkpoint latest");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(util::read_json_file(resumed / "trainer_state.json")["total_flos"].get<double>(), 2 * step_flos);
}

}  // namespace
}  // namespace fitsum::test
