// The long-document families through the command line, as users run them: tiny random PEGASUS-X (block-local
// attention with global tokens, staggered blocks) and LongT5 (local, transient-global) models, made by `fitsum train
// --config_name`, are described by `info`, tokenized, trained with exact accumulation (AdamW, Adafactor), per-layer
// checkpointing, bf16, resumed, trained by two data-parallel processes, planned, evaluated and summarized with beam
// search and the cache. Sources of uneven lengths, none a multiple of the block size, so every batch is padded.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "saved_runs.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

std::string fitsum() { return fitsum_binary().string(); }
std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

struct LongFamily {
  std::string name;
  std::string config;     // a tiny config.json
  fs::path tokenizer;     // the family's tokenizer (PEGASUS's SentencePiece, T5's)
  std::string dropout;    // the config field of the dropout rate
  std::string model_type;
};

std::ostream& operator<<(std::ostream& out, const LongFamily& f) { return out << f.name; }

std::vector<LongFamily> long_families() {
  const std::string long_t5 =
      R"({"model_type": "longt5", "vocab_size": 512, "d_model": 16, "d_kv": 4, "d_ff": 24, "num_layers": 2,
          "num_decoder_layers": 2, "num_heads": 2, "relative_attention_num_buckets": 8,
          "relative_attention_max_distance": 20, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": false,
          "local_radius": 3, "global_block_size": 4, "dropout_rate": 0.1, "pad_token_id": 0, "eos_token_id": 1,
          "decoder_start_token_id": 0, "encoder_attention_type": )";
  const auto t5_tokenizer = source_dir() / "tests" / "data" / "fixtures" / "tiny-t5";
  return {
      {"pegasus_x",
       R"({"model_type": "pegasus_x", "vocab_size": 96103, "d_model": 16, "encoder_layers": 2, "decoder_layers": 2,
           "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 24, "decoder_ffn_dim": 24,
           "block_size": 4, "num_global_tokens": 3, "stagger_local_blocks": true, "dropout": 0.1,
           "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0, "forced_eos_token_id": 1})",
       source_dir() / "data" / "pegasus", "dropout", "pegasus_x"},
      {"longt5_local", long_t5 + R"("local"})", t5_tokenizer, "dropout_rate", "longt5"},
      {"longt5_tglobal", long_t5 + R"("transient-global"})", t5_tokenizer, "dropout_rate", "longt5"},
  };
}

// Eight SAMSum dialogues cut to 6, 13, ..., 55 words (and their summaries): every batch holds sources of different
// lengths, most of them past --max_source_length's 37 tokens (9 blocks of 4 and one position).
fs::path uneven_dialogues(const fs::path& dir) {
  std::ifstream in(source_dir() / "data" / "samsum" / "validation.jsonl");
  std::ofstream out(dir / "dialogues.jsonl");
  std::string line;
  for (int i = 0; i < 8 && std::getline(in, line); ++i) {
    auto record = nlohmann::json::parse(line);
    std::istringstream words(record["dialogue"].get<std::string>());
    std::string cut, word;
    for (int w = 0; w < 6 + 7 * i && words >> word; ++w) cut += (cut.empty() ? "" : " ") + word;
    record["dialogue"] = cut;
    out << record.dump() << "\n";
  }
  return dir / "dialogues.jsonl";
}

const char* const kLengths = " --max_source_length 37 --max_target_length 19 --disable_tqdm ";

class LongFamiliesCli : public ::testing::TestWithParam<LongFamily> {
 protected:
  void SetUp() override {
    dir_ = temp_dir("long-families-" + GetParam().name + "-" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    data_ = uneven_dialogues(dir_);
    fs::create_directories(dir_ / "config");
    std::ofstream(dir_ / "config" / "config.json") << GetParam().config;
    // The tiny model: random init (seed 42) and one step, saved as a model folder with the family's tokenizer.
    const auto r = run_command(fitsum() + " train --config_name " + quoted(dir_ / "config" / "config.json") +
                               " --tokenizer_name " + quoted(GetParam().tokenizer) + " --train_file " + quoted(data_) +
                               " --output_dir " + quoted(dir_ / "model") + kLengths +
                               "--max_steps 1 --save_strategy no --learning_rate 1e-3");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    model_ = dir_ / "model";
  }

  // `fitsum train` from the tiny model into dir_/out; returns its output.
  CommandResult train(const std::string& out, const std::string& flags) {
    return run_command(fitsum() + " train --model_name_or_path " + quoted(model_) + " --train_file " + quoted(data_) +
                       " --output_dir " + quoted(dir_ / out) + kLengths + "--logging_steps 1 --seed 3 " + flags);
  }
  std::string no_dropout() const { return "--config_overrides " + GetParam().dropout + "=0.0 "; }

  fs::path dir_, data_, model_;
};

std::vector<double> losses(const fs::path& out) {
  std::vector<double> values;
  for (const auto& e : log_history(out)) {
    if (e.contains("loss")) values.push_back(e["loss"].get<double>());
  }
  return values;
}

void expect_same_losses(const fs::path& a, const fs::path& b, double tolerance) {
  const auto la = losses(a), lb = losses(b);
  ASSERT_EQ(la.size(), lb.size());
  ASSERT_FALSE(la.empty());
  for (std::size_t i = 0; i < la.size(); ++i) EXPECT_CLOSE(lb[i], la[i], relative(tolerance)) << "step " << i + 1;
}

// Micro-batch 4, 2 x 2 accumulation and 1 x 4 are the same optimizer steps: the loss is divided by the step's label
// tokens, and padded positions (of blocks and global tokens alike) change nothing.
TEST_P(LongFamiliesCli, TrainsWithExactAccumulationUnderAdamWAndAdafactor) {
  for (const auto& [optim, micro, accumulation] :
       {std::tuple<std::string, int, int>{"adamw_torch", 4, 1}, {"adamw_torch", 1, 4}, {"adafactor", 4, 1},
        {"adafactor", 2, 2}}) {
    const auto r = train(optim + std::to_string(micro),
                         no_dropout() + "--optim " + optim + " --learning_rate 1e-2 --max_steps 2 " +
                             "--save_strategy no --per_device_train_batch_size " + std::to_string(micro) +
                             " --gradient_accumulation_steps " + std::to_string(accumulation));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  for (const auto& [whole, split] : {std::pair{"adamw_torch4", "adamw_torch1"}, {"adafactor4", "adafactor2"}}) {
    expect_same_losses(dir_ / whole, dir_ / split, 1e-6);
    expect_same_weights(dir_ / whole, dir_ / split, 1e-4);
  }
  // And the two optimizers did train differently.
  EXPECT_NE(util::read_file(dir_ / "adamw_torch4" / "model.safetensors"),
            util::read_file(dir_ / "adafactor4" / "model.safetensors"));
}

// Checkpointing every layer, or only the first encoder layer, recomputes each layer with the same dropout masks: the
// weights of the plain run, bit for bit.
TEST_P(LongFamiliesCli, CheckpointedLayersTrainTheWeightsOfThePlainRun) {
  const std::string flags = "--optim adamw_torch --learning_rate 1e-2 --max_steps 2 --save_strategy no "
                            "--per_device_train_batch_size 4 ";
  for (const auto& [out, extra] :
       {std::pair<std::string, std::string>{"plain", ""},
        {"all", "--gradient_checkpointing"},
        {"first", "--gradient_checkpointing --gradient_checkpointing_encoder_layers 1 "
                  "--gradient_checkpointing_decoder_layers 0"}}) {
    const auto r = train(out, flags + extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const auto plain = util::read_file(dir_ / "plain" / "model.safetensors");
  EXPECT_EQ(util::read_file(dir_ / "all" / "model.safetensors"), plain);
  EXPECT_EQ(util::read_file(dir_ / "first" / "model.safetensors"), plain);
  EXPECT_NE(util::read_file(model_ / "model.safetensors"), plain);
}

// --bf16 computes the products in bfloat16 (the losses move, a little) and keeps float32 master weights, saved as
// float32.
TEST_P(LongFamiliesCli, Bf16TrainsInBfloat16WithFloat32Weights) {
  // Larger weights than the tiny init's, so that bfloat16's rounding shows in the loss.
  const std::string larger = GetParam().model_type == "pegasus_x" ? "init_std=0.5" : "initializer_factor=4.0";
  const auto config = util::read_json_file(dir_ / "config" / "config.json");
  for (const auto& [out, extra] : {std::pair<std::string, std::string>{"fp32", ""}, {"bf16", "--bf16"}}) {
    const auto r = run_command(fitsum() + " train --config_name " + quoted(dir_ / "config" / "config.json") +
                               " --tokenizer_name " + quoted(GetParam().tokenizer) + " --train_file " + quoted(data_) +
                               " --output_dir " + quoted(dir_ / out) + kLengths + "--config_overrides " +
                               GetParam().dropout + "=0.0," + larger +
                               " --max_steps 2 --logging_steps 1 --save_strategy no --per_device_train_batch_size 4 " +
                               extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const auto fp32 = losses(dir_ / "fp32"), bf16 = losses(dir_ / "bf16");
  ASSERT_EQ(fp32.size(), 2u);
  ASSERT_EQ(bf16.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_NE(bf16[i], fp32[i]) << "step " << i + 1 << ": no bfloat16 product";
    EXPECT_CLOSE(bf16[i], fp32[i], relative(0.05)) << "step " << i + 1;
  }
  for (const auto& [name, t] : saved_weights(dir_ / "bf16")) EXPECT_EQ(t.scalar_type(), torch::kFloat) << name;
  EXPECT_EQ(util::read_json_file(dir_ / "bf16" / "config.json")["torch_dtype"], "float32");
}

// Resuming from a checkpoint (dropout on, accumulation, checkpointing, AdamW) ends with the weights of the run that
// was not interrupted, byte for byte.
TEST_P(LongFamiliesCli, ResumesToTheWeightsOfAnUninterruptedRun) {
  const std::string flags = "--per_device_train_batch_size 2 --gradient_accumulation_steps 2 --num_train_epochs 3 "
                            "--optim adamw_torch --learning_rate 1e-3 --gradient_checkpointing --save_steps 2 ";
  const auto whole = train("whole", flags);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  fs::create_directories(dir_ / "resumed");
  fs::copy(dir_ / "whole" / "checkpoint-2", dir_ / "resumed" / "checkpoint-2", fs::copy_options::recursive);
  const auto resumed =
      train("resumed", flags + "--resume_from_checkpoint " + quoted(dir_ / "resumed" / "checkpoint-2"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(util::read_file(dir_ / "resumed" / "model.safetensors"),
            util::read_file(dir_ / "whole" / "model.safetensors"));
  EXPECT_NE(util::read_file(dir_ / "whole" / "checkpoint-2" / "model.safetensors"),
            util::read_file(dir_ / "whole" / "model.safetensors"));
}

// Two processes x accumulation 2 (--nproc_per_node 2) train the weights of one process x accumulation 4.
TEST_P(LongFamiliesCli, TwoProcessesTrainTheWeightsOfOne) {
  const std::string flags = no_dropout() + "--optim adamw_torch --learning_rate 1e-2 --max_steps 2 "
                                           "--save_strategy no --per_device_train_batch_size 1 ";
  const auto one = train("one", flags + "--gradient_accumulation_steps 4");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two = train("two", flags + "--gradient_accumulation_steps 2 --nproc_per_node 2");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("x 2 accumulation x 2 processes"), std::string::npos) << two.output;
  expect_same_losses(dir_ / "one", dir_ / "two", 1e-6);
  expect_same_weights(dir_ / "one", dir_ / "two", 1e-5);
}

std::vector<std::string> lines_in(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// `fitsum eval` with beam search reports the loss and ROUGE; `fitsum summarize` with the same decoding prints eval's
// summaries, with the key/value cache and without it.
TEST_P(LongFamiliesCli, EvaluatesAndSummarizesWithBeamSearchAndTheCache) {
  const auto metrics = dir_ / "metrics.json";
  const std::string decoding = " --num_beams 4 --max_length 12 --length_penalty 0.6 ";
  const auto e = run_command(fitsum() + " eval --model " + quoted(model_) + " --test_file " + quoted(data_) + kLengths +
                             decoding + "--per_device_eval_batch_size 3 --predictions_file " +
                             quoted(dir_ / "predictions.jsonl") + " --metrics_file " + quoted(metrics));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto m = util::read_json_file(metrics);
  EXPECT_TRUE(std::isfinite(m["eval_loss"].get<double>())) << m.dump();
  EXPECT_GT(m["eval_loss"].get<double>(), 0.0) << m.dump();
  EXPECT_TRUE(m.contains("eval_rouge1")) << m.dump();
  std::vector<std::string> expected;
  std::ifstream predictions(dir_ / "predictions.jsonl");
  for (std::string line; std::getline(predictions, line);) {
    expected.push_back(nlohmann::json::parse(line)["summary"].get<std::string>());
  }
  ASSERT_EQ(expected.size(), 8u);
  for (const std::string cache : {"", "--no_cache"}) {
    const auto s = run_command("(" + fitsum() + " summarize --model " + quoted(model_) + " --input_file " +
                               quoted(data_) + " --max_source_length 37" + decoding + cache + " 2>/dev/null)");
    ASSERT_EQ(s.exit_code, 0) << s.output;
    EXPECT_EQ(lines_in(s.output), expected) << cache;
  }
}

// `fitsum plan` under a budget that the largest micro-batch does not fit chooses a plan that does, and `train
// --max_memory` trains it.
TEST_P(LongFamiliesCli, PlansAndTrainsUnderABudget) {
  const std::string flags = " --model_name_or_path " + quoted(model_) + " --train_file " + quoted(data_) + kLengths +
                            "--per_device_train_batch_size 8 --max_steps 1 --save_strategy no ";
  const auto roomy = run_command("(" + fitsum() + " plan" + flags + "--output_dir " + quoted(dir_ / "plan") +
                                 " --max_memory 1GiB --format json 2>/dev/null)");
  ASSERT_EQ(roomy.exit_code, 0) << roomy.output;
  const auto all = nlohmann::json::parse(roomy.output);
  std::int64_t largest = 0;
  for (const auto& c : all["candidates"]) {
    if (c["per_device_train_batch_size"] == 8 && c["gradient_checkpointing_encoder_layers"] == 0 &&
        c["optim"] == "adamw_torch") {
      largest = c["predicted_peak_bytes"].get<std::int64_t>();
    }
  }
  ASSERT_GT(largest, 0) << roomy.output;
  const std::string budget = std::to_string(largest * 3 / 4);
  const auto tight = run_command("(" + fitsum() + " plan" + flags + "--output_dir " + quoted(dir_ / "plan") +
                                 " --max_memory " + budget + " --format json 2>/dev/null)");
  ASSERT_EQ(tight.exit_code, 0) << tight.output;
  const auto chosen = nlohmann::json::parse(tight.output)["chosen"];
  EXPECT_TRUE(chosen["fits"].get<bool>()) << chosen.dump();
  EXPECT_LT(chosen["predicted_peak_bytes"].get<std::int64_t>(), largest * 3 / 4) << chosen.dump();
  const auto r = train("planned", "--per_device_train_batch_size 8 --max_steps 1 --save_strategy no --max_memory " +
                                      budget);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "planned" / "model.safetensors"));
}

INSTANTIATE_TEST_SUITE_P(Families, LongFamiliesCli, ::testing::ValuesIn(long_families()),
                         [](const auto& info) { return info.param.name; });

// `fitsum tokenize` with a PEGASUS-X folder gives PEGASUS's ids, with a LongT5 folder T5's: the family's tokenizer.
TEST(LongFamiliesTokenize, TokenizeWithTheFamilysTokenizer) {
  const auto dir = temp_dir("long-families-tokenize");
  const auto data = uneven_dialogues(dir);
  const auto ids = [&](const fs::path& model, const std::string& name) {
    const auto out = dir / (name + ".jsonl");
    const auto r = run_command(fitsum() + " tokenize --model " + quoted(model) + " --input_file " + quoted(data) +
                               " --output_file " + quoted(out) + " --max_source_length 37");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return util::read_file(out);
  };
  for (const auto& family : long_families()) {
    const auto folder = dir / family.name;
    fs::create_directories(folder);
    std::ofstream(folder / "config.json") << family.config;
    fs::copy_file(family.tokenizer / "spiece.model", folder / "spiece.model");
    const auto own = ids(folder, family.name);
    EXPECT_EQ(own, ids(family.tokenizer, family.name + "-reference")) << family.name;
    EXPECT_NE(own.find("\"input_ids\":["), std::string::npos) << own;
  }
}

// `fitsum info` on the configs of google/pegasus-x-base, -large, long-t5-local-base and long-t5-tglobal-base: the
// parameters transformers counts (tests/data/long_config_counts.json, tests/data/make_long_config_counts.py) and the
// encoder's attention with its sizes.
TEST(LongFamiliesInfo, CountsTransformersParametersAndNamesTheEncoderAttention) {
  const auto expected = util::read_json_file(source_dir() / "tests" / "data" / "long_config_counts.json");
  ASSERT_EQ(expected["models"].size(), 4u);
  for (const auto& [name, model] : expected["models"].items()) {
    const auto r = run_command(fitsum() + " info --json --model " + quoted(source_dir() / "configs" / name));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["parameters"]["trainable"], model["num_parameters"]) << name;
    EXPECT_EQ(j["parameters"]["frozen"], 0) << name;
  }
  const auto info = [](const std::string& name) {
    const auto r = run_command(fitsum() + " info --json --model " + quoted(source_dir() / "configs" / name));
    return nlohmann::json::parse(r.output)["architecture"];
  };
  const auto x = info("pegasus-x-large");
  EXPECT_EQ(x["encoder_attention"], "global_local");
  EXPECT_EQ(x["block_size"], 512);
  EXPECT_EQ(x["num_global_tokens"], 128);
  EXPECT_EQ(x["stagger_local_blocks"], true);
  const auto local = info("long-t5-local-base");
  EXPECT_EQ(local["encoder_attention"], "local");
  EXPECT_EQ(local["local_radius"], 127);
  EXPECT_FALSE(local.contains("global_block_size"));
  const auto tglobal = info("long-t5-tglobal-base");
  EXPECT_EQ(tglobal["encoder_attention"], "transient_global");
  EXPECT_EQ(tglobal["global_block_size"], 16);
  EXPECT_FALSE(info("pegasus-base").contains("encoder_attention"));
}

}  // namespace
}  // namespace fitsum::test
