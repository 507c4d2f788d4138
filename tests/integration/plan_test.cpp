// `fitsum plan` and `fitsum train --max_memory` as users run them, on a random-init model with a small vocabulary
// (about 9.5M parameters: AdamW's 16 bytes per parameter need about 150 MB before any activation).
#include <array>
#include <chrono>
#include <fstream>
#include <optional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "svg_check.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

std::string model_args() {
  return " --config_name '" + (source_dir() / "configs" / "pegasus-tiny" / "config.json").string() +
         "' --config_overrides vocab_size=8000,d_model=256,encoder_layers=4,decoder_layers=4,encoder_ffn_dim=1024,"
         "decoder_ffn_dim=1024,encoder_attention_heads=8,decoder_attention_heads=8 ";
}

// Sixteen records of 40 source and 12 summary tokens.
fs::path write_records(const fs::path& dir) {
  std::ofstream out(dir / "train.jsonl");
  for (int i = 0; i < 16; ++i) {
    nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
    for (int j = 0; j < 39; ++j) ids.push_back(103 + (i * 13 + j * 7) % 500);
    ids.push_back(1);
    for (int j = 0; j < 11; ++j) labels.push_back(103 + (i * 11 + j * 5) % 500);
    labels.push_back(1);
    out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
  }
  return dir / "train.jsonl";
}

TEST(PlanCommand, JsonOnStdoutKeepsTheEffectiveBatchAndChoosesAFittingCandidate) {
  const auto dir = temp_dir("plan-json");
  const auto data = write_records(dir);
  // The subshell keeps stderr out of the captured output: stdout alone must parse as JSON.
  const auto r =
      run_command("(" + fitsum_binary().string() + " plan" + model_args() + "--train_file '" + data.string() +
                  "' --per_device_train_batch_size 2 --gradient_accumulation_steps 4 --max_memory 400MiB"
                  " --format json 2>'" +
                  (dir / "stderr.txt").string() + "')");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);  // stdout holds only the JSON
  ASSERT_TRUE(j.contains("candidates") && j.contains("chosen")) << r.output;
  // micro-batch 8/4/2/1 x checkpointing (none, all, a partial set where one fits in between) x optimizer
  EXPECT_GE(j["candidates"].size(), 4u * 2u * 2u);
  EXPECT_LE(j["candidates"].size(), 4u * 3u * 2u);
  for (const auto& c : j["candidates"]) {
    EXPECT_EQ(c["per_device_train_batch_size"].get<int>() * c["gradient_accumulation_steps"].get<int>(), 8);
    EXPECT_TRUE(c.contains("gradient_checkpointing_encoder_layers") && c.contains("gradient_checkpointing_decoder_layers") &&
                c.contains("optim") && c.contains("bf16"));
    EXPECT_GT(c["predicted_peak_bytes"].get<double>(), 0);
    EXPECT_GT(c["predicted_tokens_per_s"].get<double>(), 0);
  }
  const auto& chosen = j["chosen"];
  EXPECT_TRUE(chosen["fits"].get<bool>());
  EXPECT_LE(chosen["predicted_peak_bytes"].get<double>(), 400.0 * 1024 * 1024);
  // optim unset: AdamW (HF's default) is kept whenever one of its candidates fits, however fast Adafactor is.
  EXPECT_EQ(chosen["optim"], "adamw_torch");
  for (const auto& c : j["candidates"]) {
    if (c["fits"].get<bool>() && c["optim"] == chosen["optim"]) {
      // The fastest, or within the tie band of it (ties go to a fixed rule).
      EXPECT_LE(c["predicted_tokens_per_s"].get<double>(), chosen["predicted_tokens_per_s"].get<double>() * 1.0301);
    }
  }
}

TEST(PlanCommand, EveryKnobFixedGivesOneCandidate) {
  const auto dir = temp_dir("plan-fixed");
  const auto data = write_records(dir);
  const std::string fixed = " plan" + model_args() + "--train_file '" + data.string() +
                            "' --per_device_train_batch_size 2 --gradient_accumulation_steps 4 --no_resplit"
                            " --optim adamw_torch --gradient_checkpointing ";
  auto r = run_command("(" + fitsum_binary().string() + fixed + "--max_memory 1GiB --format json 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto plan = nlohmann::json::parse(r.output);
  ASSERT_EQ(plan["candidates"].size(), 1u) << r.output;
  EXPECT_EQ(plan["chosen"]["per_device_train_batch_size"], 2);
  EXPECT_EQ(plan["chosen"]["gradient_accumulation_steps"], 4);
  EXPECT_EQ(plan["chosen"]["optim"], "adamw_torch");
  EXPECT_EQ(plan["chosen"]["gradient_checkpointing_encoder_layers"].get<int>(), 4);
  EXPECT_EQ(plan["chosen"]["gradient_checkpointing_decoder_layers"].get<int>(), 4);
  // Below what AdamW's weights, gradients and state alone need: refused before any probe, exit 3.
  r = run_command(fitsum_binary().string() + fixed + "--max_memory 100MiB");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("is too small for optim adamw_torch"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("calibration probe"), std::string::npos) << r.output;
}

// `fitsum plan --world_size 2` plans one process of two: every candidate with ZeRO stages 0, 1 and 2. AdamW's 150 MB
// of weights, gradients and state need more than 150 MiB with the margin; with the state sharded (about half of it
// per process) they fit, with the gradients sharded too they need less still, so the plan shards, and its flags say
// so. One process, or stage 0 fixed: nothing fits.
TEST(PlanCommand, WorldSizePlansOneProcessWithAndWithoutTheOptimizerStateSharded) {
  const auto dir = temp_dir("plan-world-size");
  const auto data = write_records(dir);
  const std::string plan =
      fitsum_binary().string() + " plan" + model_args() + "--train_file '" + data.string() +
      "' --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --optim adamw_torch"
      " --max_memory 150MiB --ddp_bucket_cap_mb 1 ";  // stage 2's default buckets are this model's size
  auto r = run_command("(" + plan + "--world_size 2 --format json 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  std::array<std::size_t, 3> per_stage{};
  std::array<std::optional<double>, 3> state, gradients;
  for (const auto& c : j["candidates"]) {
    EXPECT_EQ(c["world_size"], 2);
    const auto stage = c["zero_stage"].get<std::size_t>();
    ASSERT_LT(stage, 3u);
    per_stage[stage] += 1;
    state[stage] = c["breakdown"]["optimizer_state"].get<double>();
    gradients[stage] = c["breakdown"]["gradients"].get<double>();
    if (stage == 0) EXPECT_FALSE(c["fits"].get<bool>());
  }
  EXPECT_EQ(per_stage[0], per_stage[1]);
  EXPECT_EQ(per_stage[0], per_stage[2]);
  for (std::size_t stage = 0; stage < 3; ++stage) ASSERT_TRUE(state[stage] && gradients[stage]) << stage;
  EXPECT_LT(*state[1], *state[0] * 0.6);  // half, up to the whole-tensor partition
  EXPECT_GE(*state[1], *state[0] * 0.5);
  EXPECT_EQ(*state[2], *state[1]);
  EXPECT_EQ(*gradients[1], *gradients[0]);
  EXPECT_LT(*gradients[2], *gradients[0]);  // the share, plus what a backward holds before it is summed
  const auto chosen = j["chosen"]["zero_stage"].get<int>();
  EXPECT_GE(chosen, 1);
  r = run_command(plan + "--world_size 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--optim adamw_torch --zero_stage " + std::to_string(chosen)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" zero |"), std::string::npos) << r.output;  // the table's stage column
  for (const std::string other : {"--world_size 1", "--world_size 2 --zero_stage 0"}) {
    r = run_command(plan + other);
    EXPECT_EQ(r.exit_code, 3) << other << ": " << r.output;
  }
  r = run_command(plan + "--world_size 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--world_size"), std::string::npos) << r.output;
}

// Evaluation under the same budget: 64 examples x 8 beams x 64 tokens need about 450 MB of key/value cache and
// logits beside training's; the planner lowers per_device_eval_batch_size to what fits, says so, and the measured
// peak (evaluation included) stays under the budget.
TEST(TrainWithBudget, EvaluationBatchIsLoweredToFitTheBudget) {
  const auto dir = temp_dir("train-eval-budget");
  const auto data = write_records(dir);
  const std::string args = model_args() + "--train_file '" + data.string() + "' --validation_file '" + data.string() +
                           "' --per_device_train_batch_size 2 --optim adafactor --max_memory 300MiB"
                           " --eval_strategy steps --eval_steps 1 --predict_with_generate --generation_num_beams 8"
                           " --generation_max_length 64 --per_device_eval_batch_size 64 --device cpu ";
  auto r = run_command("(" + fitsum_binary().string() + " plan" + args + "--format json 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto plan = nlohmann::json::parse(r.output);
  const auto& chosen = plan["chosen"];
  ASSERT_TRUE(chosen.contains("per_device_eval_batch_size")) << chosen.dump();
  const auto eval_batch = chosen["per_device_eval_batch_size"].get<int>();
  EXPECT_GE(eval_batch, 1);
  EXPECT_LT(eval_batch, 64);
  EXPECT_GT(chosen["breakdown"]["evaluation"].get<double>(), 0);
  EXPECT_LE(chosen["predicted_peak_bytes"].get<double>() * 1.05, 300.0 * 1024 * 1024);

  r = run_command(fitsum_binary().string() + " train" + args + "--output_dir '" + (dir / "out").string() +
                  "' --max_steps 2 --logging_steps 1 --save_strategy no");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("per_device_eval_batch_size 64 does not fit"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("using per_device_eval_batch_size " + std::to_string(eval_batch)), std::string::npos)
      << r.output;
  const auto state = util::read_json_file(dir / "out" / "trainer_state.json");
  int evaluations = 0;
  for (const auto& e : state["log_history"]) {
    if (e.contains("eval_gen_len")) ++evaluations;
    if (e.contains("peak_memory_bytes")) EXPECT_LE(e["peak_memory_bytes"].get<double>(), 300.0 * 1024 * 1024);
  }
  EXPECT_EQ(evaluations, 2);
  const auto saved = util::read_json_file(dir / "out" / "training_args.json");
  EXPECT_EQ(saved["per_device_eval_batch_size"], eval_batch);
}

TEST(TrainWithBudget, ExplicitAdamWFailsFastNamingTheBudgetAndAPlanThatFits) {
  const auto dir = temp_dir("train-adamw-too-big");
  const auto data = write_records(dir);
  const auto r = run_command(fitsum_binary().string() + " train" + model_args() + "--train_file '" + data.string() +
                             "' --output_dir '" + (dir / "out").string() +
                             "' --per_device_train_batch_size 8 --optim adamw_torch --max_memory 130MiB"
                             " --max_steps 2 --save_strategy no --device cpu");
  EXPECT_EQ(r.exit_code, 3) << r.output;  // no plan fits what was asked
  EXPECT_NE(r.output.find("is too small for optim adamw_torch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("A plan that fits"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("optim adafactor"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out" / "trainer_state.json"));
}

TEST(TrainWithBudget, PlannerChoosesAFittingPlanAndLogsPredictedNextToMeasured) {
  const auto dir = temp_dir("train-planned");
  const auto data = write_records(dir);
  const auto r = run_command(fitsum_binary().string() + " train" + model_args() + "--train_file '" + data.string() +
                             "' --output_dir '" + (dir / "out").string() +
                             "' --per_device_train_batch_size 8 --max_memory 130MiB --max_steps 2 --logging_steps 1"
                             " --save_strategy no --device cpu --memory_report '" +
                             (dir / "report.svg").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("memory plan: chose"), std::string::npos) << r.output;
  // AdamW (HF's default, optim unset) needs about 150 MB before activations: the planner says why it switches.
  EXPECT_NE(r.output.find("optim adamw_torch (the default) does not fit"), std::string::npos) << r.output;
  const auto state = util::read_json_file(dir / "out" / "trainer_state.json");
  int entries = 0;
  for (const auto& e : state["log_history"]) {
    if (!e.contains("peak_memory_bytes")) continue;
    ++entries;
    ASSERT_TRUE(e.contains("predicted_peak_bytes")) << e.dump();
    EXPECT_LE(e["peak_memory_bytes"].get<double>(), 130.0 * 1024 * 1024) << e.dump();
    EXPECT_LE(e["peak_memory_bytes"].get<double>(), e["predicted_peak_bytes"].get<double>() * 1.10) << e.dump();
  }
  EXPECT_EQ(entries, 2);
  // The picture: at least 16 candidates x 4 stacked parts, one bar per logged step, a legend of 4 colours and the
  // chosen candidate's outline, the background and the plot's frame; a y-axis in MiB, the budget line labelled, no
  // text outside the image.
  std::ifstream svg_file(dir / "report.svg");
  const std::string svg((std::istreambuf_iterator<char>(svg_file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u) << svg.substr(0, 200);
  std::size_t rects = 0;
  for (auto at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1)) ++rects;
  EXPECT_GE(rects, 16u * 4u + 2u + 5u + 2u);
  EXPECT_EQ((rects - 2u - 5u - 2u) % 4u, 0u);
  EXPECT_NE(svg.find("measured peak per logged step"), std::string::npos);
  EXPECT_NE(svg.find(">memory (MiB)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">budget 130 MiB</text>"), std::string::npos);
  const auto outside = svg_texts_outside_image(svg);
  EXPECT_TRUE(outside.empty()) << outside.front();
  const auto why_not = render_svg_to_png(dir / "report.svg", dir / "report.png");
  if (!why_not.empty()) GTEST_SKIP() << why_not;
  const auto [png_width, png_height] = png_size(dir / "report.png");
  EXPECT_GT(png_width, 600);
  EXPECT_GT(png_height, 300);
  const auto args = util::read_json_file(dir / "out" / "training_args.json");
  EXPECT_EQ(args["optim"], "adafactor");
  EXPECT_EQ(args["per_device_train_batch_size"].get<int>() * args["gradient_accumulation_steps"].get<int>(), 8);
}

TEST(TrainWithBudget, AdamWIsKeptWhenItFitsAndAutoLetsThePlannerChoose) {
  const auto dir = temp_dir("train-adamw-kept");
  const auto data = write_records(dir);
  const auto train = [&](const std::string& extra, const std::string& out) {
    return run_command(fitsum_binary().string() + " train" + model_args() + "--train_file '" + data.string() +
                       "' --output_dir '" + (dir / out).string() +
                       "' --per_device_train_batch_size 8 --max_memory 1GiB --max_steps 1 --save_strategy no"
                       " --device cpu" +
                       extra);
  };
  auto r = train("", "default");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("does not fit"), std::string::npos) << r.output;
  EXPECT_EQ(util::read_json_file(dir / "default" / "training_args.json")["optim"], "adamw_torch");
  r = train(" --optim auto", "auto");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto chosen = util::read_json_file(dir / "auto" / "training_args.json")["optim"].get<std::string>();
  EXPECT_TRUE(chosen == "adamw_torch" || chosen == "adafactor") << chosen;
}

// pegasus-large (568M parameters) against 1 GiB: weights alone are 2.3 GB. Refused from config.json before any
// weight is allocated, with or without an optimizer given, in well under 30 seconds.
TEST(PlanCommand, ABudgetTooSmallForPegasusLargeIsRefusedBeforeLoading) {
  const auto large = (source_dir() / "data" / "pegasus").string();
  for (const std::string optim : {"", " --optim adafactor", " --optim adamw_torch"}) {
    const auto start = std::chrono::steady_clock::now();
    const auto r = run_command(fitsum_binary().string() + " plan --config_name '" + large +
                               "' --max_memory 1GiB --max_source_length 512 --max_target_length 128" + optim);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.exit_code, 3) << optim << ": " << r.output;
    EXPECT_NE(r.output.find("is too small for"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("before any activation"), std::string::npos) << r.output;
    EXPECT_LT(seconds, 30.0) << optim;
  }
  // Above Adafactor's own needs with the embedding frozen (4.37 GB), below them without (4.79 GB): the refusal
  // suggests --freeze_embeds with its budget.
  const auto r = run_command(fitsum_binary().string() + " plan --config_name '" + large +
                             "' --max_memory 4.2GiB --max_source_length 512 --max_target_length 128");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("--freeze_embeds"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace fitsum::test
