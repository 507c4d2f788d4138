// Data files through every command that reads them, as Hugging Face `datasets` and run_summarization.py read them:
// gzip-compressed files whatever their name (and a broken gzip stream named in one line), text that is not UTF-8
// named by file, line and field for every format and family, and max lengths of 1 and 2, which keep the special
// tokens as the tokenizers' truncation keeps them.
#include <zlib.h>

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

std::string fitsum() { return "'" + fitsum_binary().string() + "'"; }
std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }
fs::path fixture(const std::string& name) { return source_dir() / "tests" / "data" / "fixtures" / name; }
// PEGASUS's own tokenizer (the tiny fixtures with a tokenizer are BART's and T5's).
const std::string kPegasusTokenizer = " --tokenizer_name " + ("'" + (source_dir() / "data" / "pegasus").string() + "'");
// `fitsum tokenize` with a family's tokenizer.
std::string tokenize_with(const std::string& family) {
  return fitsum() + " tokenize" + (family == "pegasus" ? kPegasusTokenizer : " --model " + quoted(fixture(family)));
}

void write_gzip(const fs::path& path, const std::string& text) {
  gzFile out = gzopen(path.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(gzwrite(out, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(out), Z_OK);
}

// The first `n` SAMSum validation records as JSON Lines text.
std::string dialogues(int n) {
  std::ifstream in(source_dir() / "data" / "samsum" / "validation.jsonl");
  std::string text, line;
  for (int i = 0; i < n && std::getline(in, line); ++i) text += line + "\n";
  return text;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The one error line a failed command prints, checked to be the only line on stderr.
std::string error_line(const CommandResult& result) {
  std::string found;
  int count = 0;
  for (const auto& line : lines_of(result.output)) {
    if (line.rfind("fitsum: error: ", 0) == 0) {
      found = line;
      ++count;
    }
  }
  EXPECT_EQ(count, 1) << result.output;
  return found;
}

TEST(DataInputs, GzipFilesAreReadByEveryCommandWhateverTheirName) {
  const auto dir = temp_dir("data-gzip");
  const std::string text = dialogues(4);
  write_bytes(dir / "plain.jsonl", text);
  write_gzip(dir / "named.jsonl.gz", text);
  write_gzip(dir / "misnamed.jsonl", text);
  const auto tokenize = [&](const std::string& input) {
    const auto out = dir / (input + ".ids");
    const auto r = run_command(tokenize_with("pegasus") + " --input_file " + quoted(dir / input) + " --output_file " +
                               quoted(out));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return util::read_file(out);
  };
  const std::string plain = tokenize("plain.jsonl");
  EXPECT_EQ(lines_of(plain).size(), 4u);
  EXPECT_EQ(tokenize("named.jsonl.gz"), plain);
  EXPECT_EQ(tokenize("misnamed.jsonl"), plain);

  const auto eval = run_command(fitsum() + " eval --model " + quoted(fixture("tiny-bart")) + " --test_file " +
                                quoted(dir / "named.jsonl.gz") +
                                " --max_source_length 32 --max_length 8 --num_beams 1 --disable_tqdm");
  EXPECT_EQ(eval.exit_code, 0) << eval.output;
  write_gzip(dir / "pairs.jsonl", "{\"prediction\": \"a b c\", \"reference\": \"a b d\"}\n");
  const auto rouge = run_command(fitsum() + " rouge --input_file " + quoted(dir / "pairs.jsonl"));
  EXPECT_EQ(rouge.exit_code, 0) << rouge.output;
  EXPECT_NE(rouge.output.find("0.666666"), std::string::npos) << rouge.output;  // rouge1 f of 2 in 3 words
}

TEST(DataInputs, ABrokenGzipFileIsOneLineNamingIt) {
  const auto dir = temp_dir("data-gzip-broken");
  write_gzip(dir / "whole.jsonl.gz", dialogues(40));
  const std::string whole = util::read_file(dir / "whole.jsonl.gz");
  write_bytes(dir / "cut.jsonl.gz", whole.substr(0, whole.size() / 2));
  const auto r = run_command(tokenize_with("pegasus") + " --input_file " + quoted(dir / "cut.jsonl.gz") +
                             " --output_file " + quoted(dir / "ids.jsonl"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::string line = error_line(r);
  EXPECT_EQ(line.rfind("fitsum: error: " + (dir / "cut.jsonl.gz").string() + ": the gzip stream ends early", 0), 0u)
      << line;
  EXPECT_FALSE(fs::exists(dir / "ids.jsonl"));
}

// datasets reads every file as UTF-8 and fails at the first invalid byte (pandas' UnicodeDecodeError for csv); fitsum
// fails too, naming the file, the line and the field, whatever the format, the family's tokenizer or the command
// (before: BART's tokenizer refused the text without naming file or line, PEGASUS and T5 took it silently).
TEST(DataInputs, TextThatIsNotUtf8IsNamedByFileLineAndFieldEverywhere) {
  const auto dir = temp_dir("data-utf8");
  const std::string latin1 = "caf\xe9";
  write_bytes(dir / "latin1.csv", "id,dialogue,summary\n1,A: hi,hi\n2,\"A: ok\nB: " + latin1 + "\",ok\n");
  write_bytes(dir / "latin1.jsonl", "{\"dialogue\": \"A: hi\", \"summary\": \"hi\"}\n\n{\"dialogue\": \"A: " + latin1 +
                                        "\", \"summary\": \"ok\"}\n");
  write_bytes(
      dir / "latin1.json",
      "[{\"dialogue\": \"A: hi\", \"summary\": \"hi\"},\n{\"dialogue\": \"ok\",\n\"summary\": \"" + latin1 + "\"}]");
  const auto expect_named = [](const CommandResult& r, const fs::path& file, const std::string& where,
                               const std::string& context) {
    EXPECT_EQ(r.exit_code, 1) << context << "\n" << r.output;
    const std::string line = error_line(r);
    EXPECT_EQ(line.rfind("fitsum: error: " + file.string() + ":" + where + "not valid UTF-8 (byte 0xe9); ", 0), 0u)
        << context << "\n"
        << line;
  };
  const std::string csv_where = "4: field 'dialogue': ";  // the second line of the record's quoted cell
  for (const std::string family : {"pegasus", "tiny-bart", "tiny-t5"}) {
    const auto r = run_command(tokenize_with(family) + " --input_file " + quoted(dir / "latin1.csv") +
                               " --output_file " + quoted(dir / "ids.jsonl"));
    expect_named(r, dir / "latin1.csv", csv_where, family);
  }
  const std::string tokenize_pegasus = tokenize_with("pegasus") + " --output_file " + quoted(dir / "ids.jsonl");
  expect_named(run_command(tokenize_pegasus + " --input_file " + quoted(dir / "latin1.jsonl")), dir / "latin1.jsonl",
               "3: ", "jsonl");
  expect_named(run_command(tokenize_pegasus + " --input_file " + quoted(dir / "latin1.json")), dir / "latin1.json",
               "3: ", "json");

  const auto train = run_command(fitsum() + " train --model_name_or_path " + quoted(fixture("tiny-bart")) +
                                 " --train_file " + quoted(dir / "latin1.csv") + " --output_dir " +
                                 quoted(dir / "out") + " --max_steps 1 --disable_tqdm");
  expect_named(train, dir / "latin1.csv", csv_where, "train");
  const auto eval = run_command(fitsum() + " eval --model " + quoted(fixture("tiny-t5")) + " --test_file " +
                                quoted(dir / "latin1.csv") + " --disable_tqdm");
  expect_named(eval, dir / "latin1.csv", csv_where, "eval");
  const auto summarize = run_command(fitsum() + " summarize --model " + quoted(fixture("tiny-bart")) +
                                     " --input_file " + quoted(dir / "latin1.csv"));
  expect_named(summarize, dir / "latin1.csv", csv_where, "summarize");

  write_bytes(dir / "pairs.jsonl", "{\"prediction\": \"" + latin1 + "\", \"reference\": \"r\"}\n");
  const auto rouge = run_command(fitsum() + " rouge --input_file " + quoted(dir / "pairs.jsonl"));
  EXPECT_EQ(rouge.exit_code, 1) << rouge.output;
  EXPECT_NE(error_line(rouge).find("pairs.jsonl' line 1 is not valid UTF-8"), std::string::npos) << rouge.output;
}

// run_summarization.py truncates with truncation=True, which keeps the special tokens: with max_source_length 1 a
// PEGASUS input is </s> alone, and training goes on (before: every record counted "with empty text" and dropped). A
// BART length below its 2 special tokens, which Hugging Face's tokenizers leave untruncated, is refused by name.
TEST(DataInputs, MaxLengthsOfOneKeepTheEosAsHuggingFacesTruncationDoes) {
  const auto dir = temp_dir("data-tiny-lengths");
  write_bytes(dir / "train.jsonl", dialogues(4));
  const auto train = run_command(
      fitsum() + " train --config_name " + quoted(source_dir() / "configs" / "pegasus-tiny" / "config.json") +
      kPegasusTokenizer + " --train_file " + quoted(dir / "train.jsonl") + " --output_dir " + quoted(dir / "out") +
      " --max_source_length 1 --max_target_length 1 --max_steps 1 --save_strategy no "
      "--disable_tqdm");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_NE(train.output.find("4 examples (4 with labels), 0 with empty text, 4 sources truncated to 1 tokens, 4 "
                              "summaries truncated to 1 tokens"),
            std::string::npos)
      << train.output;
  EXPECT_EQ(train.output.find("dropped"), std::string::npos) << train.output;

  const auto t5 = run_command(fitsum() + " tokenize --model " + quoted(fixture("tiny-t5")) + " --input_file " +
                              quoted(dir / "train.jsonl") + " --output_file " + quoted(dir / "t5.jsonl") +
                              " --max_source_length 1 --max_target_length 2");
  ASSERT_EQ(t5.exit_code, 0) << t5.output;
  const auto first = nlohmann::json::parse(lines_of(util::read_file(dir / "t5.jsonl")).at(0));
  EXPECT_EQ(first["input_ids"], nlohmann::json::array({1}));
  EXPECT_EQ(first["labels"].size(), 2u);
  EXPECT_EQ(first["labels"][1], 1);

  const auto bart = run_command(fitsum() + " train --model_name_or_path " + quoted(fixture("tiny-bart")) +
                                " --train_file " + quoted(dir / "train.jsonl") + " --output_dir " +
                                quoted(dir / "bart") + " --max_source_length 1 --max_steps 1 --disable_tqdm");
  EXPECT_EQ(bart.exit_code, 2) << bart.output;
  EXPECT_EQ(error_line(bart).rfind("fitsum: error: max_source_length 1 is below the 2 special tokens BartTokenizer "
                                   "puts around every text (<s> </s>)",
                                   0),
            0u)
      << bart.output;
}

}  // namespace
}  // namespace fitsum::test
