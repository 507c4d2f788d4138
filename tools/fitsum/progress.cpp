// Implements tools/fitsum/progress.h.
#include "progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace fitsum::cli {

namespace {

using Clock = std::chrono::steady_clock;

// The line drawn last on the terminal, the one a newline or an erase acts on: every line redraws over the previous
// one (the training bar and an evaluation's share the terminal's last row).
ProgressLine* g_on_terminal = nullptr;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

ProgressLine::ProgressLine(bool enabled, std::FILE* out)
    : enabled_(enabled), terminal_(::isatty(::fileno(out)) != 0), out_(out), start_(Clock::now()) {}

ProgressLine::~ProgressLine() {
  if (g_on_terminal != this) return;
  g_on_terminal = nullptr;
  std::fputc('\n', out_);
  std::fflush(out_);
}

std::size_t ProgressLine::terminal_columns() const {
  struct winsize size {};
  if (::ioctl(::fileno(out_), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS"); columns != nullptr) {
    char* end = nullptr;
    const long value = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && value > 0 && value < 100000) return static_cast<std::size_t>(value);
  }
  return 80;
}

std::string ProgressLine::fit_line(const std::string& label, double fraction, bool with_bar, const std::string& counts,
                                   const std::string& times, std::size_t columns) {
  const std::string tail = counts + " " + times;
  if (with_bar) {
    char percent[8];
    std::snprintf(percent, sizeof percent, "%3d%%", static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 100));
    const std::string head = label + " " + percent;
    for (int width = 20; width >= 1; --width) {
      const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * width);
      std::string line = head + "|" + std::string(filled, '#') + std::string(width - filled, ' ') + "| " + tail;
      if (columns == 0 || line.size() <= columns) return line;
    }
    std::string line = head + " " + tail;
    if (line.size() > columns) line.resize(columns);
    return line;
  }
  std::string line = label + " " + tail;
  if (columns != 0 && line.size() > columns) line.resize(columns);
  return line;
}

void ProgressLine::start(const std::string& label, std::int64_t total) {
  label_ = label;
  total_ = total;
  first_done_ = -1;
  last_counts_.clear();
  start_ = Clock::now();
  last_draw_ = Clock::time_point{};
}

std::string ProgressLine::clock_text(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, std::round(seconds)));
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%02lld:%02lld", s / 60, s % 60);
  }
  return text;
}

std::string ProgressLine::rate_text(double units_per_second) {
  char text[32];
  if (!(units_per_second > 0)) return "?it/s";
  if (units_per_second >= 1.0) {
    std::snprintf(text, sizeof text, "%.2fit/s", units_per_second);
  } else {
    std::snprintf(text, sizeof text, "%.2fs/it", 1.0 / units_per_second);
  }
  return text;
}

void ProgressLine::show(std::int64_t done, const std::string& detail, bool force) {
  if (!enabled_) return;
  const auto now = Clock::now();
  if (first_done_ < 0) first_done_ = done;
  const double since_draw = seconds_between(last_draw_, now);
  const bool finished = total_ > 0 && done >= total_;
  if (!force && !finished && since_draw < (terminal_ ? 0.2 : 30.0)) return;
  const std::string state = label_ + " " + std::to_string(done) + " " + detail;
  if (!terminal_ && state == last_counts_) return;
  last_counts_ = state;
  last_draw_ = now;
  const double elapsed = seconds_between(start_, now);
  const double rate = elapsed > 0 ? static_cast<double>(done - first_done_) / elapsed : 0.0;
  const std::string eta = rate > 0 && total_ > 0 ? clock_text(static_cast<double>(total_ - done) / rate) : "?";
  const std::string total = total_ > 0 ? std::to_string(total_) : "?";
  const std::string counts = std::to_string(done) + "/" + total;
  const std::string times = "[" + clock_text(elapsed) + "<" + eta + ", " + rate_text(rate) +
                            (detail.empty() ? "" : ", ") + detail + "]";
  const double fraction = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 0.0;
  // One column short of the terminal's width: a line that reaches the last column wraps on some terminals.
  const std::size_t columns = terminal_ ? std::max<std::size_t>(terminal_columns(), 2) - 1 : 0;
  const std::string line = fit_line(label_, fraction, total_ > 0, counts, times, columns);
  std::fprintf(out_, "%s%s%s", terminal_ ? "\r\033[K" : "", line.c_str(), terminal_ ? "" : "\n");
  std::fflush(out_);
  if (terminal_) g_on_terminal = this;
}

void clear_progress_line() {
  if (g_on_terminal != nullptr) g_on_terminal->clear();
}

void ProgressLine::clear() {
  if (g_on_terminal != this) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  g_on_terminal = nullptr;
}

}  // namespace fitsum::cli
