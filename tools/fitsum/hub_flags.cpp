// Implements tools/fitsum/hub_flags.h.
#include "hub_flags.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "progress.h"

namespace fitsum::cli {

void add_hub_flags(CLI::App& command, io::ModelSource& source) {
  command.add_option("--revision,--model_revision", source.revision,
                     "of a model named by Hub id (org/name): a branch, tag or commit (default: main)");
  command.add_option("--cache_dir", source.cache_dir,
                     "the Hugging Face cache for Hub ids (default: HF_HUB_CACHE, else $HF_HOME/hub, else "
                     "~/.cache/huggingface/hub)");
  command.add_option("--token", source.token,
                     "the Hub token for gated and private models (default: HF_TOKEN, else `huggingface-cli login`'s)");
}

io::HubOptions hub_options(const io::ModelSource& source, bool quiet) {
  return {source.revision, source.cache_dir, source.token, quiet ? io::HubProgressFn{} : download_progress()};
}

namespace {

using Clock = std::chrono::steady_clock;

// tqdm's format_sizeof with unit_scale: "2.40M", "90.1k", "999".
std::string sizeof_text(double number) {
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  for (const char* unit : units) {
    if (std::fabs(number) < 999.5) {
      char text[32];
      const char* format = std::fabs(number) < 9.995 ? "%1.2f%s" : std::fabs(number) < 99.95 ? "%2.1f%s" : "%3.0f%s";
      std::snprintf(text, sizeof text, format, number, unit);
      return text;
    }
    number /= 1000.0;
  }
  return std::to_string(static_cast<long long>(number)) + "E";
}

// One bar at a time; a line left unfinished (an error unwinding the command) is ended when the drawer goes.
struct DownloadBar {
  bool terminal = ::isatty(STDERR_FILENO) != 0;
  std::string file;
  Clock::time_point start;
  Clock::time_point last_draw;
  std::uint64_t first_done = 0;
  bool open = false;

  ~DownloadBar() {
    if (open && terminal) std::fputs("\n", stderr);
  }

  void draw(const io::HubProgress& p) {
    const auto now = Clock::now();
    if (p.filename != file || !open) {
      file = p.filename;
      start = now;
      first_done = p.done;
      open = true;
      // A terminal shows the bar at once; a log gets the finished line (and one every 30 s of a long file).
      last_draw = terminal ? Clock::time_point{} : now;
    }
    const double since = std::chrono::duration<double>(now - last_draw).count();
    if (!p.finished && since < (terminal ? 0.2 : 30.0)) return;
    last_draw = now;
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const double rate = elapsed > 0 ? static_cast<double>(p.done - first_done) / elapsed : 0.0;
    const double fraction = p.total > 0 ? static_cast<double>(p.done) / static_cast<double>(p.total) : 1.0;
    const int filled = static_cast<int>(fraction * 10);
    const std::string remaining =
        rate > 0 ? ProgressLine::clock_text(static_cast<double>(p.total - p.done) / rate) : "?";
    char line[512];
    std::snprintf(line, sizeof line, "%s: %3.0f%%|%s%s| %sB/%sB [%s<%s, %sB/s]", p.filename.c_str(), fraction * 100,
                  std::string(filled, '#').c_str(), std::string(10 - filled, ' ').c_str(),
                  sizeof_text(static_cast<double>(p.done)).c_str(), sizeof_text(static_cast<double>(p.total)).c_str(),
                  ProgressLine::clock_text(elapsed).c_str(), remaining.c_str(), sizeof_text(rate).c_str());
    std::fprintf(stderr, terminal ? "\r\033[K%s%s" : "%s%s", line, p.finished || !terminal ? "\n" : "");
    std::fflush(stderr);
    if (p.finished) open = false;
  }
};

}  // namespace

io::HubProgressFn download_progress() {
  auto bar = std::make_shared<DownloadBar>();
  return [bar](const io::HubProgress& p) { bar->draw(p); };
}

}  // namespace fitsum::cli
