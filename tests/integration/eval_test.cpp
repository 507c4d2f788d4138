// `fitsum eval` and `fitsum summarize` as users run them: the fixture's greedy and beam outputs exactly, the
// evaluation loss, ROUGE that agrees with `fitsum rouge` on the same predictions, and stdin dialogues.
#include <algorithm>
#include <chrono>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

fs::path fixture_dir() { return shared_dir() / "fixtures" / "tiny-pegasus"; }

std::vector<nlohmann::json> read_jsonl(const fs::path& file) {
  std::vector<nlohmann::json> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

std::vector<std::int64_t> without_trailing_padding(const nlohmann::json& row) {
  std::vector<std::int64_t> ids = row.get<std::vector<std::int64_t>>();
  while (ids.size() > 1 && ids.back() == 0) ids.pop_back();
  return ids;
}

TEST(EvalCommand, ReproducesFixtureGreedyAndBeamSequences) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("generate");
  const auto c = util::read_json_file(fixture_dir() / "case.json");
  {
    std::ofstream out(dir / "sources.jsonl");
    for (std::size_t i = 0; i < c["greedy"]["input_ids"].size(); ++i) {
      nlohmann::json ids = nlohmann::json::array();
      for (std::size_t j = 0; j < c["greedy"]["input_ids"][i].size(); ++j) {
        if (c["greedy"]["attention_mask"][i][j] == 1) ids.push_back(c["greedy"]["input_ids"][i][j]);
      }
      out << nlohmann::json{{"id", i}, {"input_ids", ids}}.dump() << "\n";
    }
  }
  struct Setting {
    const char* name;
    std::string flags;
  };
  for (const auto& s :
       {Setting{"greedy", "--num_beams 1 --max_length 16"},
        Setting{"beam", "--num_beams 4 --max_length 16 --length_penalty 0.8 --min_length 0"},
        Setting{"beam_min_length", "--num_beams 3 --max_length 14 --length_penalty 1.2 --min_length 12"}}) {
    const auto predictions = dir / (std::string(s.name) + ".jsonl");
    const auto r = run_command(fitsum_binary().string() + " eval --model '" + fixture_dir().string() +
                               "' --test_file '" + (dir / "sources.jsonl").string() + "' --predictions_file '" +
                               predictions.string() + "' " + s.flags);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto records = read_jsonl(predictions);
    const auto& expected = c[s.name]["sequences"];
    ASSERT_EQ(records.size(), expected.size());
    for (std::size_t i = 0; i < records.size(); ++i) {
      EXPECT_EQ(records[i]["id"], i);
      EXPECT_EQ(records[i]["generated_ids"].get<std::vector<std::int64_t>>(), without_trailing_padding(expected[i]))
          << s.name << " source " << i;
      EXPECT_FALSE(records[i].contains("summary"));  // the fixture has no tokenizer
    }
  }
}

TEST(EvalCommand, ReportsTheEvaluationLoss) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("loss");
  const auto c = util::read_json_file(fixture_dir() / "case.json");
  {
    std::ofstream out(dir / "case.jsonl");
    for (std::size_t i = 0; i < c["input_ids"].size(); ++i) {
      nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
      for (std::size_t j = 0; j < c["input_ids"][i].size(); ++j) {
        if (c["attention_mask"][i][j] == 1) ids.push_back(c["input_ids"][i][j]);
      }
      for (const auto& l : c["labels"][i]) {
        if (l != -100) labels.push_back(l);
      }
      out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
    }
  }
  // One batch of both records: HF's eval loss is then the batch's mean token loss, the fixture's loss (computed
  // without padding_idx, which does not change a forward pass).
  const auto r = run_command(fitsum_binary().string() + " eval --model '" + fixture_dir().string() + "' --test_file '" +
                             (dir / "case.jsonl").string() +
                             "' --per_device_eval_batch_size 2 "
                             "--metrics_file '" +
                             (dir / "metrics.json").string() + "' --num_beams 1 --max_length 8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto metrics = util::read_json_file(dir / "metrics.json");
  const double want = c["loss"];
  EXPECT_CLOSE(metrics["eval_loss"].get<double>(), want, relative(1e-5));
  EXPECT_EQ(metrics["eval_samples"], 2);
}

TEST(EvalCommand, RougeAgreesWithTheRougeCommandOnItsOwnPredictions) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("rouge");
  const auto model = shared_dir() / "data" / "pegasus-tiny";
  const auto r =
      run_command(fitsum_binary().string() + " eval --model '" + model.string() + "' --test_file '" +
                  (source_dir() / "data" / "samsum" / "test.jsonl").string() +
                  "' --max_eval_samples 6 --num_beams 2 --max_length 20 --min_length 5 "
                  "--max_source_length 128 --predictions_file '" +
                  (dir / "pred.jsonl").string() + "' --metrics_file '" + (dir / "metrics.json").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto metrics = util::read_json_file(dir / "metrics.json");
  ASSERT_TRUE(metrics.contains("eval_rouge1")) << metrics.dump();
  // References as run_summarization uses them: the labels decoded. Rebuild them with `fitsum tokenize` is not
  // needed: score the predictions against the summaries the eval tokenized (max_target_length 128 truncates none).
  const auto predictions = read_jsonl(dir / "pred.jsonl");
  const auto references = read_jsonl(source_dir() / "data" / "samsum" / "test.jsonl");
  ASSERT_EQ(predictions.size(), 6u);
  {
    std::ofstream out(dir / "pairs.jsonl");
    for (std::size_t i = 0; i < predictions.size(); ++i) {
      EXPECT_EQ(predictions[i]["id"], references[i]["id"]);
      EXPECT_EQ(predictions[i]["generated_ids"][0], 0);  // the decoder start token
      out << nlohmann::json{{"prediction", predictions[i]["summary"]}, {"reference", references[i]["summary"]}}.dump()
          << "\n";
    }
  }
  const auto scored = run_command("(" + fitsum_binary().string() + " rouge --input_file '" +
                                  (dir / "pairs.jsonl").string() + "' 2>/dev/null)");
  ASSERT_EQ(scored.exit_code, 0) << scored.output;
  const auto aggregate = nlohmann::json::parse(scored.output);
  for (const char* type : {"rouge1", "rouge2", "rougeL", "rougeLsum"}) {
    EXPECT_NEAR(metrics[std::string("eval_") + type].get<double>(), aggregate[type]["fmeasure"].get<double>() * 100,
                1e-9)
        << type;
  }
  EXPECT_GT(metrics["eval_gen_len"].get<double>(), 4.0);
}

// T5's embedding table has more rows than its tokenizer has ids (t5-small: 32128 against 32100; the tiny fixture: 512
// against 400 pieces + 100 sentinels). A generated id past the tokenizer's is skipped when the summary is decoded, as
// the fast tokenizer's batch_decode in run_summarization skips it; before, decoding it failed the whole evaluation.
TEST(EvalCommand, GeneratedIdsPastTheTokenizersAreSkippedWhenDecodedNotAnError) {
  const auto dir = temp_dir("ids_past_tokenizer");
  const auto model = dir / "t5";
  fs::copy(source_dir() / "tests" / "data" / "fixtures" / "tiny-t5", model);
  auto generation = util::read_json_file(model / "generation_config.json");
  generation["forced_bos_token_id"] = 505;  // the first generated token: past the tokenizer's 500 ids
  generation.erase("_from_model_config");    // else generate() prefers config.json's settings, as HF's does
  util::write_json_file_atomic(model / "generation_config.json", generation);
  {
    std::ofstream out(dir / "test.jsonl");
    out << nlohmann::json{{"dialogue", "Amanda: I baked cookies."}, {"summary", "Amanda baked cookies."}}.dump()
        << "\n";
  }
  const auto r = run_command(fitsum_binary().string() + " eval --model '" + model.string() + "' --test_file '" +
                             (dir / "test.jsonl").string() + "' --source_prefix 'summarize: ' --max_length 6 " +
                             "--min_length 0 --predictions_file '" + (dir / "predictions.jsonl").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto predictions = read_jsonl(dir / "predictions.jsonl");
  ASSERT_EQ(predictions.size(), 1u);
  const auto ids = predictions[0]["generated_ids"].get<std::vector<std::int64_t>>();
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[1], 505) << predictions[0].dump();
  EXPECT_EQ(predictions[0]["summary"].get<std::string>().find("extra_id"), std::string::npos) << predictions[0].dump();
}

TEST(SummarizeCommand, OneSummaryPerStdinDialogueEqualToEval) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("summarize");
  const auto model = shared_dir() / "data" / "pegasus-tiny";
  {
    std::ofstream out(dir / "dialogues.txt");
    out << "Amanda: I baked cookies. Do you want some?\nJerry: Sure!\nAmanda: I'll bring you tomorrow :-)\n\n\n"
           "Olivia: Who are you voting for in this election?\nOliver: Liberals as always.\n";
    std::ofstream data(dir / "dialogues.jsonl");
    data << nlohmann::
                json{{"dialogue",
                      "Amanda: I baked cookies. Do you want some?\nJerry: Sure!\nAmanda: I'll bring you tomorrow :-)"}}
                    .dump()
         << "\n"
         << nlohmann::json{{"dialogue",
                            "Olivia: Who are you voting for in this election?\nOliver: Liberals as always."}}
                .dump()
         << "\n";
  }
  const std::string flags = " --num_beams 2 --max_length 12 --min_length 3";
  const auto from_stdin = run_command("(" + fitsum_binary().string() + " summarize --model '" + model.string() + "'" +
                                      flags + " < '" + (dir / "dialogues.txt").string() + "' 2>/dev/null)");
  ASSERT_EQ(from_stdin.exit_code, 0) << from_stdin.output;
  const auto from_file = run_command("(" + fitsum_binary().string() + " summarize --model '" + model.string() + "'" +
                                     flags + " --input_file '" + (dir / "dialogues.jsonl").string() + "' 2>/dev/null)");
  ASSERT_EQ(from_file.exit_code, 0) << from_file.output;
  EXPECT_EQ(std::count(from_stdin.output.begin(), from_stdin.output.end(), '\n'), 2) << from_stdin.output;
  EXPECT_EQ(from_stdin.output, from_file.output);
}

TEST(SummarizeCommand, AHugeStdinDialogueCostsWhatItsFirstTokensCost) {
  FITSUM_REQUIRE_SHARED();
  // 64 MB of one dialogue without a blank line: before, all of it was held and encoded whole (gigabytes, minutes).
  const auto model = shared_dir() / "data" / "pegasus-tiny";
  const auto start = std::chrono::steady_clock::now();
  const auto r =
      run_command("(yes 'Amanda: I baked cookies. Do you want some?' | head -c 64000000 | timeout -s KILL 60 " +
                  fitsum_binary().string() + " summarize --model '" + model.string() +
                  "' --max_source_length 64 --min_length 1 --max_length 8 2>/dev/null)");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

}  // namespace
}  // namespace fitsum::test
