// Numbers and flag names as Hugging Face users type them, in every command: integers and floats read as Python's
// int() and float() read them (HfArgumentParser's types: 010 is 10, 0x10 is refused), every number checked against
// its range as a usage error (exit 2, one line naming the flag) before any model or data is read, suggestions for
// mistyped flags that prefer the training flag and know HF users' abbreviations, and list flags given as JSON lists.
#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

std::string fitsum() { return fitsum_binary().string(); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The value a "resolved configuration" line prints for `key` ("  seed      42").
std::string resolved(const std::string& output, const std::string& key) {
  std::smatch match;
  const std::regex line("\n  " + key + " +([^\n]*)");
  return std::regex_search(output, match, line) ? match[1].str() : "<" + key + " not printed>";
}

// Lines of `output` that start with "fitsum: error:".
int error_lines(const std::string& output) {
  int count = 0;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) count += line.rfind("fitsum: error:", 0) == 0 ? 1 : 0;
  return count;
}

TEST(Flags, IntegersAreDecimalAsPythonReadsThem) {
  // bench matmul echoes its --size: CLI11 alone read 010 as octal 8. Only standard output is the JSON line (a
  // warning on standard error, such as a slow machine's, is not).
  const auto r = run_command("(" + fitsum() + " bench matmul --size 010 --seconds 0 --num_threads 1 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["size"], 10) << r.output;
}

TEST(Flags, TrainReadsIntegersAndJsonListsAsHfDoesOnTheCommandLineAndInAnArgsFile) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("flags-train");
  const auto eight = util::read_file(write_copy_task_records(dir / "eight.jsonl"));
  const auto records = dir / "train.jsonl";
  write_bytes(records, eight + eight + eight);
  // The args file's strings go through the same reading as flags (00042 was 34, 010 was 8).
  util::write_json_file_atomic(dir / "args.json", nlohmann::json{{"seed", "00042"}, {"max_steps", "01"}});
  const auto r =
      run_command(fitsum() + " train '" + (dir / "args.json").string() + "' --model_name_or_path '" +
                  (shared_dir() / "fixtures" / "tiny-pegasus").string() + "' --train_file '" + records.string() +
                  "' --output_dir '" + (dir / "out").string() +
                  "' --gradient_accumulation_steps 010 --per_device_train_batch_size 01 --logging_steps 1_0 "
                  "--learning_rate ' 1e-3 ' --save_strategy no --disable_tqdm --report_to '[\"tensorboard\"]'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(resolved(r.output, "seed"), "42") << r.output;
  EXPECT_EQ(resolved(r.output, "max_steps"), "1") << r.output;
  EXPECT_EQ(resolved(r.output, "gradient_accumulation_steps"), "10") << r.output;
  EXPECT_EQ(resolved(r.output, "per_device_train_batch_size"), "1") << r.output;
  EXPECT_EQ(resolved(r.output, "logging_steps"), "10.0") << r.output;
  EXPECT_EQ(resolved(r.output, "learning_rate"), "0.001") << r.output;
  EXPECT_EQ(resolved(r.output, "report_to"), "[\"tensorboard\"]") << r.output;
  EXPECT_TRUE(fs::exists(dir / "out" / "runs")) << r.output;
}

TEST(Flags, NumbersPythonRefusesAreUsageErrorsInEveryCommand) {
  const auto dir = temp_dir("flags-syntax");
  const std::string none = " '" + (dir / "missing").string() + "'";
  struct Case {
    std::string command, flag, says;
  };
  for (const auto& c :
       {Case{"train --output_dir" + none, "--per_device_train_batch_size 0x10", "decimal integer"},
        Case{"train --output_dir" + none, "--seed 1e3", "decimal integer"},
        Case{"train --output_dir" + none, "--learning_rate 0x1p-3", "is not a number"},
        Case{"train --output_dir" + none, "--dataloader_num_workers 0x2", "decimal integer"},
        Case{"plan --output_dir" + none, "--world_size 0x10", "decimal integer"},
        Case{"eval --model" + none + " --test_file" + none, "--per_device_eval_batch_size 0x10", "decimal integer"},
        Case{"eval --model" + none + " --test_file" + none, "--length_penalty 0x1p1", "not a number"},
        Case{"summarize --model" + none, "--num_beams 0x4", "decimal integer"},
        Case{"tokenize --input_file /dev/null", "--max_samples 0x10", "decimal integer"},
        Case{"rouge --input_file" + none, "--seed 0x10", "decimal integer"},
        Case{"bench train", "--batch 0x10", "decimal integer"}, Case{"bench train", "--seed -1", "negative"},
        Case{"bench matmul", "--size 0x10", "decimal integer"}}) {
    const auto r = run_command("timeout 60 " + fitsum() + " " + c.command + " " + c.flag + " </dev/null");
    const auto flag = c.flag.substr(0, c.flag.find(' '));
    EXPECT_EQ(r.exit_code, 2) << c.command << " " << c.flag << ": " << r.output;
    EXPECT_TRUE(contains(r.output, flag + ": '")) << c.flag << ": " << r.output;
    EXPECT_TRUE(contains(r.output, c.says)) << c.flag << ": " << r.output;
    EXPECT_EQ(error_lines(r.output), 1) << r.output;
  }
}

TEST(Flags, NumbersOutOfRangeAreUsageErrorsBeforeAnythingIsRead) {
  const auto dir = temp_dir("flags-range");
  // Nothing named here exists: the number's error must come first.
  const std::string none = " '" + (dir / "missing").string() + "'";
  const std::string train = "train --model_name_or_path" + none + " --train_file" + none + " --output_dir" + none;
  const std::string eval = "eval --model" + none + " --test_file" + none;
  const std::string tokenize =
      "tokenize --tokenizer_name '" + dir.string() + "' --input_file /dev/null --output_file" + none;
  struct Case {
    std::string command, says;
  };
  for (const auto& c : {
           Case{train + " --adam_beta1 1.5", "adam_beta1 must be in [0, 1), got 1.5"},
           Case{train + " --adam_epsilon -1", "adam_epsilon must be a finite number, not negative"},
           Case{train + " --weight_decay inf", "weight_decay must be a finite number"},
           Case{train + " --max_grad_norm -1", "max_grad_norm must not be negative"},
           Case{train + " --learning_rate nan", "learning_rate must be a finite number"},
           Case{train + " --warmup_ratio 1.5", "warmup_ratio must be in [0, 1]"},
           Case{train + " --label_smoothing_factor 1", "label_smoothing_factor must be in [0, 1)"},
           Case{train + " --num_train_epochs inf", "num_train_epochs must be in (0, 1e6]"},
           Case{train + " --max_steps 10000000000000000", "max_steps is 10000000000000000"},
           Case{train + " --logging_steps 2.5", "logging_steps must be a whole number of steps"},
           Case{train + " --seed 4294967296", "seed must be in [0, 4294967295]"},
           Case{train + " --ddp_timeout 9999999999", "ddp_timeout must be in [1, 2147483647]"},
           Case{train + " --early_stopping_threshold nan", "early_stopping_threshold must be a finite number"},
           Case{train + " --max_target_length 99999999999", "max_target_length is 99999999999, more than"},
           Case{train + " --pad_to_multiple_of 99999999999", "pad_to_multiple_of must be in [1, 16777216]"},
           Case{train + " --per_device_train_batch_size 99999999999", "per_device_train_batch_size is 99999999999"},
           Case{eval + " --num_beams 0", "num_beams (0) must be at least 1"},
           Case{eval + " --length_penalty nan", "length_penalty (nan) must be a finite number"},
           Case{eval + " --per_device_eval_batch_size 0", "--per_device_eval_batch_size must be in [1, 16777216]"},
           Case{eval + " --max_source_length -1", "max_source_length is -1"},
           Case{"summarize --model" + none + " --max_length 99999999999", "max_length (99999999999) must be at most"},
           Case{tokenize + " --max_source_length 0", "max_source_length is 0"},
           Case{"bench matmul --size -5", "--size must be in [1, 65536], got -5"},
           Case{"bench matmul --seconds 1e300", "--seconds must be in [0, 86400], got 1e+300"},
           Case{"bench matmul --seconds nan", "--seconds must be in [0, 86400], got nan"},
           Case{"bench matmul --seconds -1", "--seconds must be in [0, 86400], got -1"},
           Case{"bench train --learning_rate nan", "--learning_rate must be a finite number"},
           Case{"bench train --batch -1", "--batch must be in [1, 16777216]"},
           Case{"bench train --profile" + none + "/trace.json", "--profile"},
           Case{"bench bogus", "unknown command 'bench bogus'; fitsum bench runs one of: train, matmul"},
       }) {
    const auto r = run_command("timeout 60 " + fitsum() + " " + c.command);
    EXPECT_EQ(r.exit_code, 2) << c.command << ": " << r.output;
    EXPECT_TRUE(contains(r.output, c.says)) << c.command << ": " << r.output;
    EXPECT_EQ(error_lines(r.output), 1) << c.command << ": " << r.output;
    // Not LibTorch's error (a loaded machine's slow-BLAS warning may name LibTorch).
    EXPECT_FALSE(contains(r.output, "FITSUM_DEBUG=1 shows where")) << c.command << ": " << r.output;
    EXPECT_FALSE(contains(r.output, "\"impl\"")) << c.command << ": " << r.output;  // no benchmark ran
    EXPECT_FALSE(fs::exists(dir / "missing")) << c.command;
  }
}

TEST(Flags, BenchProfileWritesTheProfileIntoAFolder) {
  const auto dir = temp_dir("flags-profile");
  const auto r = run_command(fitsum() +
                             " bench train --shape tiny --batch 1 --src_len 8 --tgt_len 4 --steps 1 --warmup 0 "
                             "--num_threads 1 --profile '" +
                             dir.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "frame #")) << r.output;
  const auto profile = dir / "fitsum_bench_train.json";
  ASSERT_TRUE(fs::exists(profile)) << r.output;
  EXPECT_TRUE(contains(r.output, "wrote the profile of one step to " + profile.string())) << r.output;
  std::ifstream in(profile);
  const auto events = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(events.is_array()) << "not a chrome://tracing list";
  EXPECT_FALSE(events.empty());
}

TEST(Flags, MistypedFlagsGetTheLikelyName) {
  const auto dir = temp_dir("flags-typos");
  struct Case {
    std::string command, suggestion;
  };
  for (const auto& c : {Case{"train --per_device_batch_size 2", "did you mean --per_device_train_batch_size?"},
                        Case{"train --lr 1e-4", "did you mean --learning_rate?"},
                        Case{"plan --per_device_batch 2", "did you mean --per_device_train_batch_size?"},
                        Case{"train --epochs 3", "did you mean --num_train_epochs?"},
                        Case{"train --max_len 512", "did you mean --max_source_length?"},
                        Case{"eval --bs 4", "did you mean --per_device_eval_batch_size?"},
                        Case{"summarize --batch_size 4", "did you mean --per_device_eval_batch_size?"},
                        Case{"summarize --max_len 64", "did you mean --max_length?"}}) {
    const auto r = run_command(fitsum() + " " + c.command);
    EXPECT_EQ(r.exit_code, 2) << c.command << ": " << r.output;
    EXPECT_TRUE(contains(r.output, c.suggestion)) << c.command << ": " << r.output;
  }
  util::write_json_file_atomic(dir / "args.json", nlohmann::json{{"lr", 1e-4}});
  const auto r = run_command(fitsum() + " train '" + (dir / "args.json").string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "unknown key 'lr'; did you mean 'learning_rate'?")) << r.output;
}

TEST(Flags, ListFlagsRefuseWhatTheyCannotTakeWithoutSuggestingIt) {
  const auto dir = temp_dir("flags-lists");
  const std::string train = fitsum() + " train --output_dir '" + (dir / "missing").string() + "' ";
  auto r = run_command(train + "--report_to '[\"wandb\"]'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "report_to wandb is not supported by fitsum")) << r.output;
  r = run_command(train + "--report_to '[tensorboard'");  // not JSON: one word, refused by name
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "report_to [tensorboard is not supported")) << r.output;
  // The list forms the message offers are taken: --report_to=[...] too, and the empty list is none.
  for (const char* list : {"--report_to='[\"tensorboard\", \"all\"]'", "--report_to '[]'"}) {
    r = run_command(train + list);
    EXPECT_EQ(r.exit_code, 2) << list << ": " << r.output;
    EXPECT_TRUE(contains(r.output, "train_file is required")) << list << ": " << r.output;
  }
}

// transformers 5 replaced the --group_by_length switch with --train_sampling_strategy; both spellings work, and the
// samplers fitsum does not have are refused by name rather than silently trained with another order.
TEST(Flags, TrainSamplingStrategyIsTransformersFivesNameForTheSampler) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("flags-sampling");
  const auto eight = util::read_file(write_copy_task_records(dir / "eight.jsonl"));
  write_bytes(dir / "train.jsonl", eight + eight);
  const std::string train = fitsum() + " train --model_name_or_path '" +
                            (shared_dir() / "fixtures" / "tiny-pegasus").string() + "' --train_file '" +
                            (dir / "train.jsonl").string() + "' --max_steps 1 --save_strategy no --disable_tqdm ";
  for (const char* strategy : {"random", "group_by_length"}) {
    const auto out = dir / strategy;
    const auto r = run_command(train + "--output_dir '" + out.string() + "' --train_sampling_strategy " + strategy);
    ASSERT_EQ(r.exit_code, 0) << strategy << ": " << r.output;
    const auto args = util::read_json_file(out / "training_args.json");
    EXPECT_EQ(args["group_by_length"], std::string(strategy) == "group_by_length") << strategy;
  }
  for (const char* strategy : {"sequential", "batch_rebalance", "shuffled"}) {
    const auto r = run_command(train + "--output_dir '" + (dir / "refused").string() +
                               "' --train_sampling_strategy " + strategy);
    EXPECT_EQ(r.exit_code, 2) << strategy << ": " << r.output;
    EXPECT_EQ(error_lines(r.output), 1) << strategy << ": " << r.output;
    EXPECT_TRUE(contains(r.output, "--train_sampling_strategy")) << strategy << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir / "refused")) << strategy;
  }
}

}  // namespace
}  // namespace fitsum::test
