// What a user sees on a terminal: fitsum run on a pseudo-terminal (util-linux's `script`), its bytes replayed on a
// model of a terminal of a known width (wrapping, carriage return, erase to the end of the row), and the screen
// checked row by row: progress bars never wrap (an erase clears only the last row of a wrapped line, leaving the rest
// of the bar above the next output), log lines start rows of their own, and an error never lands on a bar's row.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_support.h"

namespace fitsum::test {
namespace {

constexpr std::size_t kColumns = 60;

// The screen after `bytes`, row by row, on a terminal `columns` wide that wraps at the right edge.
std::vector<std::string> render(const std::string& bytes, std::size_t columns) {
  std::vector<std::string> rows(1);
  std::size_t row = 0, column = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c == '\r') {
      column = 0;
    } else if (c == '\n') {
      rows.emplace_back();
      ++row;
      column = 0;
    } else if (c == '\033' && i + 1 < bytes.size() && bytes[i + 1] == '[') {
      std::size_t end = i + 2;
      while (end < bytes.size() && !std::isalpha(static_cast<unsigned char>(bytes[end]))) ++end;
      if (end < bytes.size() && bytes[end] == 'K' && rows[row].size() > column) rows[row].resize(column);
      i = end;
    } else if (static_cast<unsigned char>(c) >= 0x20) {
      if (column == columns) {  // the cursor is past the last column: this character starts the next row
        rows.emplace_back();
        ++row;
        column = 0;
      }
      if (rows[row].size() <= column) rows[row].resize(column + 1, ' ');
      rows[row][column++] = c;
    }
  }
  while (!rows.empty() && rows.back().empty()) rows.pop_back();
  return rows;
}

// Runs a fitsum command line on a pseudo-terminal `kColumns` wide; returns what the terminal received.
CommandResult on_terminal(const std::string& args) {
  const std::string inner = "stty cols " + std::to_string(kColumns) + " rows 24; exec " + fitsum_binary().string() +
                            " " + args;
  return run_command("timeout -s KILL 120 script -qfec \"" + inner + "\" /dev/null");
}

std::string screen_text(const std::vector<std::string>& rows) {
  std::string text;
  for (const auto& row : rows) text += row + "\n";
  return text;
}

fs::path samsum_records(const fs::path& dir, const std::string& split, int count) {
  std::ifstream in(shared_dir() / "data" / "samsum" / (split + ".jsonl"));
  std::ofstream out(dir / (split + ".jsonl"));
  std::string line;
  for (int i = 0; i < count && std::getline(in, line); ++i) out << line << "\n";
  return dir / (split + ".jsonl");
}

std::string tiny_training(const fs::path& dir) {
  return "--model_name_or_path '" + (shared_dir() / "data" / "pegasus-tiny").string() + "' --train_file '" +
         samsum_records(dir, "train", 16).string() + "' --output_dir '" + (dir / "out").string() +
         "' --per_device_train_batch_size 2 --max_source_length 64 --max_target_length 16 --logging_steps 1 "
         "--save_strategy no";
}

TEST(Terminal, ProgressBarsNeverWrapAndLogLinesStartRowsOfTheirOwn) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("terminal_logs");
  const auto result = on_terminal("train " + tiny_training(dir) + " --max_steps 4 --validation_file '" +
                                  samsum_records(dir, "validation", 4).string() +
                                  "' --evaluation_strategy steps --eval_steps 2 --per_device_eval_batch_size 2");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto rows = render(result.output, kColumns);
  int log_rows = 0;
  for (const auto& row : rows) {
    // Every bar was erased before the next output: no piece of one is left on the screen.
    EXPECT_EQ(row.find("it/s"), std::string::npos) << screen_text(rows);
    EXPECT_EQ(row.find("s/it"), std::string::npos) << screen_text(rows);
    EXPECT_NE(row.rfind("train ", 0), 0u) << screen_text(rows);
    if (row.find("\"loss\"") != std::string::npos || row.find("\"eval_loss\"") != std::string::npos) {
      EXPECT_EQ(row.front(), '{') << screen_text(rows);
      ++log_rows;
    }
  }
  EXPECT_GE(log_rows, 6) << screen_text(rows);  // 4 training logs, 2 evaluations (longer rows wrap, as they should)
  // The bar was drawn: the terminal received it, fitted to the width.
  EXPECT_NE(result.output.find("train  50%|"), std::string::npos) << result.output;
}

TEST(Terminal, AnErrorDuringTrainingStartsARowOfItsOwnBelowTheBar) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("terminal_error");
  // A learning rate that makes the second step's loss non-finite: the run ends with an error while its bar is drawn.
  const auto result = on_terminal("train " + tiny_training(dir) + " --max_steps 6 --learning_rate 1e10");
  ASSERT_EQ(result.exit_code, 1) << result.output;
  const auto rows = render(result.output, kColumns);
  std::size_t error_row = 0;
  while (error_row < rows.size() && rows[error_row].rfind("fitsum: error: training diverged at step 2", 0) != 0) {
    ++error_row;
  }
  ASSERT_LT(error_row, rows.size()) << screen_text(rows);
  ASSERT_GE(error_row, 1u) << screen_text(rows);
  // The bar's last state stays above the error, where it stopped.
  EXPECT_EQ(rows[error_row - 1].rfind("train  16%|", 0), 0u) << screen_text(rows);
}

}  // namespace
}  // namespace fitsum::test
