// The Hugging Face workflow around `fitsum train`: the best model (best_metric, best_model_checkpoint,
// load_best_model_at_end, save_total_limit keeping the best), early stopping, run_summarization's result files and
// model card, and in-training ROUGE with the sentence splitting of `fitsum eval --rouge_split_sentences`.
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "event_file.h"
#include "fitsum/io/safetensors.h"
#include "fitsum/io/tensorboard.h"
#include "fitsum/tokenizer/pegasus_tokenizer.h"
#include "fitsum/util/files.h"
#include "svg_check.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

std::string fitsum() { return fitsum_binary().string(); }

fs::path write_records(const fs::path& dir) { return write_copy_task_records(dir / "records.jsonl"); }

// Trains the tiny fixture on the records, evaluating and saving every step.
CommandResult train_evaluating_every_step(const fs::path& dir, const std::string& extra) {
  const auto data = write_records(dir);
  return run_command(fitsum() + " train --model_name_or_path '" +
                     (shared_dir() / "fixtures" / "tiny-pegasus").string() + "' --train_file '" + data.string() +
                     "' --validation_file '" + data.string() + "' --output_dir '" + (dir / "out").string() +
                     "' --optim adafactor --learning_rate 1e-3 --per_device_train_batch_size 4 --logging_steps 1 "
                     "--eval_strategy steps --eval_steps 1 --save_steps 1 --disable_tqdm " +
                     extra);
}

std::vector<std::pair<std::int64_t, double>> evaluations(const nlohmann::json& history, const std::string& key) {
  std::vector<std::pair<std::int64_t, double>> out;
  for (const auto& e : history) {
    if (e.contains(key)) out.emplace_back(e["step"].get<std::int64_t>(), e[key].get<double>());
  }
  return out;
}

torch::Tensor all_weights(const fs::path& folder) {
  io::SafetensorsReader reader(folder / "model.safetensors");
  std::vector<torch::Tensor> flat;
  for (const auto& e : reader.entries()) flat.push_back(reader.read(e.name).flatten().to(torch::kDouble));
  return torch::cat(flat);
}

// greater_is_better true on the loss makes the best evaluation an early one (training lowers the loss), so the
// best checkpoint is not the newest: rotation must keep it and the final model must be its weights.
TEST(Workflow, BestCheckpointIsKeptAndBecomesTheFinalModel) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("best-model");
  const auto r = train_evaluating_every_step(
      dir,
      "--max_steps 4 --save_total_limit 1 --load_best_model_at_end --metric_for_best_model loss "
      "--greater_is_better true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto out = dir / "out";
  const auto state = util::read_json_file(out / "trainer_state.json");
  const auto evals = evaluations(state["log_history"], "eval_loss");
  ASSERT_EQ(evals.size(), 4u) << state.dump();
  auto best = evals.front();
  for (const auto& e : evals) {
    if (e.second > best.second) best = e;
  }
  ASSERT_NE(best.first, 4) << "the loss rose at every step: this run cannot tell the best from the newest";
  EXPECT_EQ(state["best_metric"].get<double>(), best.second);
  const auto best_folder = out / ("checkpoint-" + std::to_string(best.first));
  EXPECT_EQ(fs::path(state["best_model_checkpoint"].get<std::string>()), best_folder);
  EXPECT_EQ(state["best_global_step"], best.first);
  // save_total_limit 1 keeps the newest and the best.
  EXPECT_TRUE(fs::exists(best_folder / "model.safetensors"));
  EXPECT_TRUE(fs::exists(out / "checkpoint-4" / "model.safetensors"));
  for (int step = 1; step <= 3; ++step) {
    if (step != best.first) EXPECT_FALSE(fs::exists(out / ("checkpoint-" + std::to_string(step)))) << step;
  }
  const auto final_weights = all_weights(out);
  EXPECT_TRUE(torch::equal(final_weights, all_weights(best_folder)));
  EXPECT_FALSE(torch::equal(final_weights, all_weights(out / "checkpoint-4")));
  EXPECT_NE(r.output.find("loading best model from"), std::string::npos) << r.output;
}

// output_dir/training_curves.svg: the training loss and the evaluation loss against the step, with a y-axis title,
// a legend giving each series' last value, no text outside the image; rendered to PNG.
TEST(Workflow, TrainingCurvesShowEveryLoggedMetric) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("curves");
  const auto r = train_evaluating_every_step(dir, "--max_steps 4 --save_strategy no");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream file(dir / "out" / "training_curves.svg");
  const std::string svg((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_EQ(svg.rfind("<svg", 0), 0u) << svg.substr(0, 200);
  const auto history = util::read_json_file(dir / "out" / "trainer_state.json")["log_history"];
  const auto evals = evaluations(history, "eval_loss");
  ASSERT_EQ(evals.size(), 4u);
  std::ostringstream last;
  last.precision(4);
  last << evals.back().second;
  EXPECT_NE(svg.find(">eval_loss (last " + last.str() + ")</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">train loss (last "), std::string::npos);
  EXPECT_NE(svg.find(">optimizer step</text>"), std::string::npos);
  std::size_t points = 0;
  for (auto at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++points;
  EXPECT_EQ(points, 8u);  // 4 training losses + 4 evaluation losses
  const auto outside = svg_texts_outside_image(svg);
  EXPECT_TRUE(outside.empty()) << outside.front();
  const auto why_not = render_svg_to_png(dir / "out" / "training_curves.svg", dir / "curves.png");
  if (!why_not.empty()) GTEST_SKIP() << why_not;
  EXPECT_GT(png_size(dir / "curves.png").first, 500);
}

// HF's EarlyStoppingCallback: with patience 2 the run stops at the second evaluation in a row that does not beat
// the best so far by more than the threshold. The expected step is worked out from the logged metrics.
TEST(Workflow, EarlyStoppingStopsAfterPatienceEvaluationsWithoutImprovement) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("early-stopping");
  const auto r = train_evaluating_every_step(
      dir,
      "--max_steps 12 --load_best_model_at_end --greater_is_better true --early_stopping_patience 2 "
      "--early_stopping_threshold 0.0001 --save_total_limit 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto state = util::read_json_file(dir / "out" / "trainer_state.json");
  const auto evals = evaluations(state["log_history"], "eval_loss");
  std::optional<double> best;
  int without = 0;
  std::int64_t expected_stop = 12;
  for (const auto& [step, value] : evals) {
    without = (!best || (value > *best && value - *best > 0.0001)) ? 0 : without + 1;
    if (!best || value > *best) best = value;
    if (without >= 2) {
      expected_stop = step;
      break;
    }
  }
  ASSERT_LT(expected_stop, 12) << "no two evaluations without improvement: " << state.dump();
  EXPECT_EQ(state["global_step"], expected_stop);
  EXPECT_EQ(evals.back().first, expected_stop);
  EXPECT_NE(r.output.find("early stopping at step " + std::to_string(expected_stop)), std::string::npos) << r.output;
  const auto train_results = util::read_json_file(dir / "out" / "train_results.json");
  EXPECT_DOUBLE_EQ(train_results["epoch"].get<double>(), static_cast<double>(expected_stop) / 2.0);  // 2 steps/epoch
}

TEST(Workflow, EarlyStoppingWithoutLoadBestModelAtEndIsAUsageError) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("early-stopping-usage");
  const auto r = train_evaluating_every_step(dir, "--max_steps 2 --early_stopping_patience 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("early_stopping_patience requires load_best_model_at_end"), std::string::npos) << r.output;
}

// report_to tensorboard: one event file under HF's default logging_dir (output_dir/runs/<date>_<host>), framing and
// CRCs valid, HF's tags for every number of every log entry at its global step; report_to none writes none.
TEST(Workflow, ReportToTensorboardWritesHfTagsAtTheirSteps) {
  FITSUM_REQUIRE_SHARED();
  if (!io::tensorboard_available()) GTEST_SKIP() << "built without protobuf";
  const auto dir = temp_dir("tensorboard");
  auto r = train_evaluating_every_step(dir, "--max_steps 2 --save_strategy no --report_to tensorboard");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<fs::path> runs;
  for (const auto& entry : fs::directory_iterator(dir / "out" / "runs")) runs.push_back(entry.path());
  ASSERT_EQ(runs.size(), 1u);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(runs[0])) files.push_back(entry.path());
  ASSERT_EQ(files.size(), 1u);
  const auto events = read_event_file(files[0]);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  std::map<std::string, std::vector<std::pair<std::int64_t, float>>> by_tag;
  for (std::size_t i = 1; i < events.size(); ++i) {
    for (const auto& [tag, value] : events[i].scalars) by_tag[tag].emplace_back(events[i].step, value);
  }
  const auto history = util::read_json_file(dir / "out" / "trainer_state.json")["log_history"];
  const std::map<std::string, std::string> tags = {
      {"loss", "train/loss"},           {"learning_rate", "train/learning_rate"},
      {"grad_norm", "train/grad_norm"}, {"epoch", "train/epoch"},
      {"eval_loss", "eval/loss"},       {"train_loss", "train/train_loss"}};
  for (const auto& [key, tag] : tags) {
    std::vector<std::pair<std::int64_t, float>> expected;
    for (const auto& e : history) {
      if (e.contains(key)) expected.emplace_back(e["step"].get<std::int64_t>(), e[key].get<float>());
    }
    ASSERT_FALSE(expected.empty()) << key;
    EXPECT_EQ(by_tag[tag], expected) << tag;
  }
  const auto quiet = temp_dir("tensorboard-none");
  r = train_evaluating_every_step(quiet, "--max_steps 1 --save_strategy no --report_to none");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(quiet / "out" / "runs"));
  r = train_evaluating_every_step(temp_dir("tensorboard-wandb"), "--max_steps 1 --report_to wandb");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("report_to wandb is not supported by fitsum"), std::string::npos) << r.output;
}

std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The shared tiny PEGASUS (its own outputs score ROUGE 0: it writes dots) with final_logits_bias raised on the
// word pieces of the first summaries of `records` and no_repeat_ngram_size 1, so that its predictions share words
// with the references and every ROUGE score is a number that can differ (as tests/hf/test_eval.py does in Python).
fs::path summary_word_model(const fs::path& records, const fs::path& folder) {
  const auto source = shared_dir() / "data" / "pegasus-tiny";
  fs::create_directories(folder);
  for (const auto& entry : fs::directory_iterator(source))
    fs::copy_file(entry.path(), folder / entry.path().filename());
  const auto tokenizer = tokenizer::PegasusTokenizer::from_folder(source);
  std::map<tokenizer::TokenId, int> counts;
  std::ifstream in(records);
  std::string line;
  for (int i = 0; i < 10 && std::getline(in, line); ++i) {
    for (auto id : tokenizer.encode(nlohmann::json::parse(line)["summary"].get<std::string>())) {
      const auto piece = tokenizer.id_to_token(id);
      if (!tokenizer.is_special(id) && piece.size() > 3 && std::isalpha(static_cast<unsigned char>(piece.back()))) {
        counts[id] += 1;
      }
    }
  }
  io::SafetensorsReader reader(source / "model.safetensors");
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& e : reader.entries()) tensors.emplace_back(e.name, reader.read(e.name));
  for (auto& [name, tensor] : tensors) {
    if (name != "final_logits_bias") continue;
    for (const auto& [id, count] : counts) tensor[0][id] += 8.0 + 0.05 * count;
  }
  fs::remove(folder / "model.safetensors");
  io::write_safetensors(folder / "model.safetensors", tensors);
  auto generation = util::read_json_file(folder / "generation_config.json");
  generation.erase("_from_model_config");
  generation["no_repeat_ngram_size"] = 1;
  fs::remove(folder / "generation_config.json");
  util::write_json_file_atomic(folder / "generation_config.json", generation);
  return folder;
}

// run_summarization.py's files: train/eval/predict/all_results.json with HF's keys, generated_predictions.txt with
// one prediction per test record (the very summaries `fitsum eval` generates from the saved model), and README.md.
// The final evaluation splits sentences for rougeLsum like `fitsum eval --rouge_split_sentences`.
TEST(Workflow, RunSummarizationResultFilesAndModelCard) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("results");
  const auto samsum = source_dir() / "data" / "samsum";
  const auto model = summary_word_model(samsum / "validation.jsonl", dir / "model");
  const auto out = dir / "out";
  const std::string generation = "--generation_num_beams 1 --generation_max_length 40 ";
  const auto r =
      run_command(fitsum() + " train --model_name_or_path '" + model.string() + "' --train_file '" +
                  (samsum / "train.jsonl").string() + "' --validation_file '" + (samsum / "validation.jsonl").string() +
                  "' --test_file '" + (samsum / "test.jsonl").string() + "' --output_dir '" + out.string() +
                  "' --max_train_samples 8 --max_eval_samples 6 --max_predict_samples 5 --max_source_length 64 "
                  "--max_target_length 32 --per_device_train_batch_size 4 --per_device_eval_batch_size 3 --max_steps 2 "
                  "--learning_rate 0 --save_strategy no --do_eval --do_predict --predict_with_generate "
                  "--rouge_split_sentences --disable_tqdm " +
                  generation);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const auto train = util::read_json_file(out / "train_results.json");
  for (const char* key : {"train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "epoch",
                          "train_samples"}) {
    EXPECT_TRUE(train.contains(key)) << key << " in " << train.dump();
  }
  EXPECT_EQ(train["train_samples"], 8);
  EXPECT_DOUBLE_EQ(train["epoch"].get<double>(), 1.0);
  const auto evaluation = util::read_json_file(out / "eval_results.json");
  for (const char* key : {"eval_loss", "eval_rouge1", "eval_rouge2", "eval_rougeL", "eval_rougeLsum", "eval_gen_len",
                          "eval_runtime", "eval_samples_per_second", "epoch"}) {
    EXPECT_TRUE(evaluation.contains(key)) << key << " in " << evaluation.dump();
  }
  EXPECT_EQ(evaluation["eval_samples"], 6);
  const auto predict = util::read_json_file(out / "predict_results.json");
  for (const char* key :
       {"predict_loss", "predict_rouge1", "predict_rougeLsum", "predict_gen_len", "predict_runtime"}) {
    EXPECT_TRUE(predict.contains(key)) << key << " in " << predict.dump();
  }
  EXPECT_EQ(predict["predict_samples"], 5);
  const auto all = util::read_json_file(out / "all_results.json");
  for (const auto* part : {&train, &evaluation, &predict}) {
    for (const auto& item : part->items()) EXPECT_EQ(all[item.key()], item.value()) << item.key();
  }

  // The same model, decoding options and ROUGE settings through `fitsum eval`.
  const auto eval_command = fitsum() + " eval --model '" + out.string() + "' --max_source_length 64 " +
                            "--max_target_length 32 --per_device_eval_batch_size 3 --num_beams 1 --max_length 40 " +
                            "--disable_tqdm ";
  auto e = run_command(eval_command + "--test_file '" + (samsum / "test.jsonl").string() +
                       "' --max_eval_samples 5 --predictions_file '" + (dir / "test.jsonl").string() + "'");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto predictions = lines_of(out / "generated_predictions.txt");
  const auto records = lines_of(dir / "test.jsonl");
  ASSERT_EQ(predictions.size(), 5u);
  ASSERT_EQ(records.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    const auto record = nlohmann::json::parse(records[i]);
    EXPECT_EQ(predictions[i], record["summary"].get<std::string>()) << "line " << i + 1;
    EXPECT_FALSE(record["reference"].get<std::string>().empty());  // the reference next to the prediction
  }
  // In-training ROUGE splits sentences as fitsum eval --rouge_split_sentences does (and that changes rougeLsum).
  const auto validation = "--test_file '" + (samsum / "validation.jsonl").string() + "' --max_eval_samples 6 ";
  e = run_command(eval_command + validation + "--rouge_split_sentences --metrics_file '" +
                  (dir / "split.json").string() + "'");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  e = run_command(eval_command + validation + "--metrics_file '" + (dir / "plain.json").string() + "'");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto split = util::read_json_file(dir / "split.json"), plain = util::read_json_file(dir / "plain.json");
  EXPECT_GT(split["eval_rouge1"].get<double>(), 0.0);
  EXPECT_NE(split["eval_rougeLsum"], plain["eval_rougeLsum"]) << "splitting changed nothing: the check cannot fail";
  EXPECT_DOUBLE_EQ(evaluation["eval_rougeLsum"].get<double>(), split["eval_rougeLsum"].get<double>());
  EXPECT_DOUBLE_EQ(evaluation["eval_rouge1"].get<double>(), split["eval_rouge1"].get<double>());

  // The model card names the base model, the data and the hyperparameters, and gives the results.
  std::ifstream card_file(out / "README.md");
  const std::string card((std::istreambuf_iterator<char>(card_file)), std::istreambuf_iterator<char>());
  for (const std::string& part :
       {"fine-tuned version of `" + model.string() + "`", std::string("train.jsonl"),
        std::string("- learning_rate: 0.0"), std::string("- Rouge1: "), std::string("### Training results")}) {
    EXPECT_NE(card.find(part), std::string::npos) << part << " not in\n" << card;
  }
  // As HF's card: the table lists evaluations during training (none here); do_eval's is given above it.
  EXPECT_EQ(card.find("| Training Loss | Epoch | Step |"), std::string::npos) << card;
}

}  // namespace
}  // namespace fitsum::test
