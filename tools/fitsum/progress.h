// Progress as tqdm draws it, on stderr: "train  12%|###       | 12/100 [00:34<04:10, 2.86s/it, loss=5.961]".
// On a terminal the line is redrawn in place (at most 5 times a second) and never wider than the terminal (the bar
// narrows, then the text is cut), so that erasing it erases all of it; otherwise a plain line is written at most
// every 30 s, or when forced (at each log entry), so piped output shows progress without flooding. A line still
// drawn when its ProgressLine is destroyed (an error unwinding the command) is ended, so that what follows, the
// error included, starts on a line of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace fitsum::cli {

class ProgressLine {
 public:
  // `enabled` false (disable_tqdm) draws nothing. `out` is where the line goes (stderr).
  explicit ProgressLine(bool enabled, std::FILE* out = stderr);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Starts timing a new phase (training, an evaluation pass): elapsed, rate and ETA count from here.
  void start(const std::string& label, std::int64_t total);
  // The phase's total, once known (it keeps its start time).
  void set_total(std::int64_t total) { total_ = total; }
  // `done` of the phase's total are complete; `detail` follows the rate (e.g. "loss=5.961", "micro-batch 3/64").
  void show(std::int64_t done, const std::string& detail, bool force = false);
  // Erases the line on a terminal, before other output is printed.
  void clear();

  // tqdm's numbers, for tests: "01:05", "1:02:03"; "2.86s/it" or "3.50it/s".
  static std::string clock_text(double seconds);
  static std::string rate_text(double units_per_second);
  // The text of one line, `label bar counts [times, rate, detail]`, no wider than `columns` (0: unbounded): the bar
  // narrows first, then disappears, then the text is cut.
  static std::string fit_line(const std::string& label, double fraction, bool with_bar, const std::string& counts,
                              const std::string& times, std::size_t columns);

 private:
  // Columns of the terminal `out_` is: its window size, else $COLUMNS, else 80.
  std::size_t terminal_columns() const;

  bool enabled_;
  bool terminal_;
  std::FILE* out_;
  std::string label_;
  std::int64_t total_ = 0;
  std::int64_t first_done_ = -1;  // `done` at the phase's first show: rates count the work of this run only
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  std::string last_counts_;  // done and detail of the last line written: a plain line is not repeated
};

// Erases whichever line is drawn on the terminal (none: nothing), before a command's closing lines.
void clear_progress_line();

}  // namespace fitsum::cli
