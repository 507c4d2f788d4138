// The command line under hostile inputs: crafted weight files, FIFOs and devices where files belong, configs past
// any buildable size, JSON nested a million deep. Every case ends with one line "fitsum: error: ..." and exit status
// 1 (2 for bad usage), within seconds, never a signal, a hang or a LibTorch stack dump.
#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"
#include "torch_archive.h"

namespace fitsum::test {
namespace {

// Runs fitsum with a 60 s limit (a hang is a failure, not a stuck suite).
CommandResult fitsum(const std::string& args) {
  return run_command("timeout -s KILL 60 " + fitsum_binary().string() + " " + args);
}

void expect_one_line_error(const CommandResult& result, int status, const std::string& needle) {
  EXPECT_EQ(result.exit_code, status) << result.output;
  EXPECT_EQ(result.output.rfind("fitsum: error: ", 0), 0u) << result.output;
  EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
  EXPECT_NE(result.output.find(needle), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("Exception raised from"), std::string::npos) << result.output;  // c10 backtrace
}

fs::path config_folder(const std::string& name, const std::string& config_text) {
  const auto dir = temp_dir(name);
  write_bytes(dir / "config.json", config_text);
  return dir;
}

TEST(HostileInputs, ACraftedBinIsRefusedNotValidated) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("bin");
  fs::copy_file(shared_dir() / "fixtures" / "tiny-pegasus" / "config.json", dir / "config.json");
  // A storage offset 100 past a 4-element storage: the old reader read heap bytes and said "validated".
  const auto pickle =
      pickle_state_dict({{"final_logits_bias", pickle_tensor("FloatStorage", "0", 4, 100, {1, 167}, {167, 1})}});
  write_bytes(dir / "pytorch_model.bin", torch_archive(pickle, {{"0", float_bytes({1, 2, 3, 4})}}));
  const auto result = fitsum("info --model '" + dir.string() + "'");
  expect_one_line_error(result, 1, "pytorch_model.bin");
  EXPECT_EQ(result.output.find("validated"), std::string::npos) << result.output;
  // The pickle that crashed LibTorch's unpickler (SIGSEGV) is a one-line error too.
  write_bytes(dir / "pytorch_model.bin", torch_archive("\x80\x02R.", {}));
  expect_one_line_error(fitsum("info --model '" + dir.string() + "'"), 1, "empty stack");
}

TEST(HostileInputs, AFifoAsConfigOrDataFileIsRefusedAtOnce) {
  const auto dir = temp_dir("fifo");
  ASSERT_EQ(::mkfifo((dir / "config.json").c_str(), 0600), 0);
  expect_one_line_error(fitsum("info --model '" + dir.string() + "'"), 1, "FIFO");
  ASSERT_EQ(::mkfifo((dir / "data.jsonl").c_str(), 0600), 0);
  expect_one_line_error(fitsum("rouge --input_file '" + (dir / "data.jsonl").string() + "'"), 1, "FIFO");
  expect_one_line_error(
      fitsum("tokenize --model '" + (source_dir() / "data" / "pegasus").string() + "' --input_file '" +
             (dir / "data.jsonl").string() + "' --output_file '" + (dir / "out.jsonl").string() + "'"),
      1, "FIFO");
  fs::create_directory(dir / "folder.jsonl");
  expect_one_line_error(fitsum("rouge --input_file '" + (dir / "folder.jsonl").string() + "'"), 1, "is a folder");
}

TEST(HostileInputs, ConfigsPastAnyBuildableSizeAreRefusedNotPrintedNegative) {
  const auto dir = config_folder("vocab", R"({"model_type": "pegasus", "vocab_size": 1000000000000000000})");
  expect_one_line_error(fitsum("info --model '" + dir.string() + "'"), 2, "'vocab_size' is 1000000000000000000");
}

TEST(HostileInputs, JsonNestedAMillionDeepIsRefusedWhileParsing) {
  const auto dir = config_folder("deep", std::string(1000000, '[') + std::string(1000000, ']'));
  expect_one_line_error(fitsum("info --model '" + dir.string() + "'"), 1, "nest more than 64 levels");
}

TEST(HostileInputs, ControlCharactersInNamesCannotBreakTheOneLineError) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("names");
  fs::copy_file(shared_dir() / "fixtures" / "tiny-pegasus" / "config.json", dir / "config.json");
  const auto pickle = pickle_state_dict({{"evil\nname\x1b[2J", pickle_tensor("FloatStorage", "0", 4, 0, {4}, {1})}});
  write_bytes(dir / "pytorch_model.bin", torch_archive(pickle, {{"0", float_bytes({1, 2, 3, 4})}}));
  const auto result = fitsum("info --model '" + dir.string() + "'");
  expect_one_line_error(result, 1, "evil; name\\x1b[2J");
}

// A command that printed progress first: the error is its last line, and one line.
void expect_error_as_last_line(const CommandResult& result, const std::string& needle) {
  EXPECT_EQ(result.exit_code, 1) << result.output;
  const auto line = result.output.find("fitsum: error: ");
  ASSERT_NE(line, std::string::npos) << result.output;
  EXPECT_EQ(result.output.find('\n', line), result.output.size() - 1) << result.output;
  EXPECT_NE(result.output.find(needle, line), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("index out of range in self"), std::string::npos) << result.output;
}

// PEGASUS's tokenizer (96103 ids) with the 167-id fixture model: before, "index out of range in self" from inside the
// first forward pass. Now training stops while reading the data, naming the file, the record, both sizes and the
// flag to fix; summarize (text from stdin, no data file) stops before the forward pass, naming the tensor.
TEST(HostileInputs, ATokenizerOfAnotherModelIsNamedNotAnIndexOutOfRange) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("tokenizer-mismatch");
  const std::string model = (shared_dir() / "fixtures" / "tiny-pegasus").string();
  const std::string tokenizer = (source_dir() / "data" / "pegasus").string();
  write_bytes(dir / "train.jsonl", "{\"dialogue\": \"the\", \"summary\": \"the\"}\n"
                                   "{\"dialogue\": \"Eric and Rob are going to watch a stand-up.\", \"summary\": \"a\"}\n");
  const auto train = fitsum("train --model_name_or_path '" + model + "' --tokenizer_name '" + tokenizer +
                            "' --train_file '" + (dir / "train.jsonl").string() + "' --output_dir '" +
                            (dir / "out").string() + "' --max_steps 1 --skip_bad_records");
  expect_error_as_last_line(train, "train.jsonl:2: field 'dialogue': the tokenizer gives token id 6303");
  EXPECT_NE(train.output.find("vocab_size is 167); the tokenizer belongs to another model"), std::string::npos)
      << train.output;
  EXPECT_EQ(train.output.find("training:"), std::string::npos) << train.output;

  const auto summarize = run_command("echo 'Eric and Rob' | timeout -s KILL 60 " +
                                     fitsum_binary().string() + " summarize --model '" + model +
                                     "' --tokenizer_name '" + tokenizer + "'");
  expect_error_as_last_line(summarize, "input_ids holds token id 7374, outside the model's vocabulary 0..166");

  // tokenize with the model's folder writes ids for that model: the same check, and no output file is left.
  const auto tokenize = fitsum("tokenize --model '" + model + "' --tokenizer_name '" + tokenizer + "' --input_file '" +
                               (dir / "train.jsonl").string() + "' --output_file '" + (dir / "ids.jsonl").string() +
                               "'");
  expect_error_as_last_line(tokenize, "train.jsonl:2: field 'dialogue': the tokenizer gives token id 6303");
  EXPECT_FALSE(fs::exists(dir / "ids.jsonl"));
}

// BART's and T5's tokenizer files as a user could get them wrong or an attacker could write them: each is named with
// the field at fault; nothing reaches the model (a negative or 2^31 id would index past the embedding table), and
// no file makes fitsum build billions of tokens.
TEST(HostileInputs, BrokenByteLevelBpeAndT5TokenizerFilesAreNamedWithTheirField) {
  const auto dir = temp_dir("bpe-files");
  write_bytes(dir / "d.jsonl", "{\"dialogue\": \"hi there\", \"summary\": \"ok\"}\n");
  const std::string bart_class = "{\"tokenizer_class\": \"BartTokenizer\"}";
  const std::string bpe = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": ";
  struct Case {
    std::vector<std::pair<std::string, std::string>> files;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{{"vocab.json", "[1, 2]"}, {"merges.txt", "#v\n"}}, "is not a JSON object of token -> id"},
      {{{"vocab.json", "{\"a\": -5}"}, {"merges.txt", "#v\n"}}, "token 'a' has id -5"},
      {{{"vocab.json", "{\"a\": 2147483647}"}, {"merges.txt", "#v\n"}}, "not an integer in 0 .. 2147483646"},
      {{{"tokenizer.json", "{\"model\": 5}"}, {"tokenizer_config.json", bart_class}}, "model is not a BPE model"},
      {{{"tokenizer.json", bpe + "[[1, 2]]}}"}, {"tokenizer_config.json", bart_class}}, "model.merges holds [1,2]"},
      {{{"tokenizer.json", bpe + "[]}, \"added_tokens\": [{\"content\": \"x\", \"id\": 2147483647}]}"},
        {"tokenizer_config.json", bart_class}},
       "added_tokens[0]"},
      {{{"tokenizer.json", bpe + "[]}, \"added_tokens\": 3}"}, {"tokenizer_config.json", bart_class}},
       "added_tokens is not a list"},
      {{{"tokenizer.json", bpe + "[]}}"}, {"tokenizer_config.json", "{\"tokenizer_class\": 5}"}},
       "tokenizer_class is not a string"},
      {{{"tokenizer.json", bpe + "[]}}"}, {"tokenizer_config.json", "{\"add_prefix_space\": \"yes\"}"}},
       "add_prefix_space is \"yes\""},
      {{{"spiece.model", "x"},
        {"tokenizer_config.json", "{\"tokenizer_class\": \"T5Tokenizer\", \"extra_ids\": 2000000000}"}},
       "extra_ids is 2000000000"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto folder = dir / ("case" + std::to_string(i));
    fs::create_directories(folder);
    for (const auto& [name, text] : cases[i].files) write_bytes(folder / name, text);
    SCOPED_TRACE(cases[i].needle);
    expect_one_line_error(fitsum("tokenize --tokenizer_name '" + folder.string() + "' --input_file '" +
                                 (dir / "d.jsonl").string() + "' --output_file '" + (dir / "o.jsonl").string() + "'"),
                          1, cases[i].needle);
  }
}

TEST(HostileInputs, UsageErrorsAreOneLineWithExitTwo) {
  expect_one_line_error(fitsum("info --model x --no_such_flag"), 2, "--no_such_flag");
  expect_one_line_error(fitsum("rouge --input_file x.jsonl --use_stemmer maybe"), 2, "use_stemmer");
}

}  // namespace
}  // namespace fitsum::test
