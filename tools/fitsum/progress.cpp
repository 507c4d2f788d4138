// Implements tools/fitsum/progress.h.
#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace fitsum::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

ProgressLine::ProgressLine(bool enabled, std::FILE* out)
    : enabled_(enabled), terminal_(::isatty(::fileno(out)) != 0), out_(out), start_(Clock::now()) {}

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
  const std::string counts = label_ + " " + std::to_string(done) + " " + detail;
  if (!terminal_ && counts == last_counts_) return;
  last_counts_ = counts;
  last_draw_ = now;
  const double elapsed = seconds_between(start_, now);
  const double rate = elapsed > 0 ? static_cast<double>(done - first_done_) / elapsed : 0.0;
  const std::string eta = rate > 0 && total_ > 0 ? clock_text(static_cast<double>(total_ - done) / rate) : "?";
  std::string bar;
  if (total_ > 0) {
    const double fraction = std::clamp(static_cast<double>(done) / static_cast<double>(total_), 0.0, 1.0);
    const int width = 20;
    const int filled = static_cast<int>(fraction * width);
    char percent[8];
    std::snprintf(percent, sizeof percent, "%3d%%", static_cast<int>(fraction * 100));
    bar = std::string(percent) + "|" + std::string(filled, '#') + std::string(width - filled, ' ') + "| ";
  }
  const std::string total = total_ > 0 ? std::to_string(total_) : "?";
  std::fprintf(out_, "%s%s %s%lld/%s [%s<%s, %s%s%s]%s", terminal_ ? "\r\033[K" : "", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), total.c_str(), clock_text(elapsed).c_str(), eta.c_str(),
               rate_text(rate).c_str(), detail.empty() ? "" : ", ", detail.c_str(), terminal_ ? "" : "\n");
  std::fflush(out_);
  drawn_ = terminal_;
}

void ProgressLine::clear() {
  if (!drawn_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace fitsum::cli
