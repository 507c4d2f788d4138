// Implements include/fitsum/util/cuda_alloc_conf.h.
#include "fitsum/util/cuda_alloc_conf.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <utility>
#include <vector>

#include "fitsum/util/checked_math.h"

namespace fitsum::util {

namespace {

constexpr std::uint64_t kMiB = 1 << 20;

// The allocator's lexer: ',', ':', '[' and ']' are tokens of their own, spaces are dropped.
std::vector<std::string> lex(const std::string& text) {
  std::vector<std::string> tokens;
  std::string word;
  for (const char c : text) {
    if (c == ',' || c == ':' || c == '[' || c == ']') {
      if (!word.empty()) tokens.push_back(word);
      word.clear();
      tokens.emplace_back(1, c);
    } else if (c != ' ') {
      word.push_back(c);
    }
  }
  if (!word.empty()) tokens.push_back(word);
  return tokens;
}

[[noreturn]] void bad_conf(const std::string& what, const std::string& text, const std::string& why) {
  throw std::invalid_argument(what + " '" + text + "': " + why +
                              " (format: key:value,... as PYTORCH_CUDA_ALLOC_CONF, e.g. "
                              "expandable_segments:True,max_split_size_mb:128)");
}

class ConfParser {
 public:
  ConfParser(const std::string& text, std::string what) : text_(text), what_(std::move(what)), tokens_(lex(text)) {}

  CudaAllocConf parse() {
    CudaAllocConf conf;
    conf.text = text_;
    for (i_ = 0; i_ < tokens_.size(); ++i_) {
      const std::string key = tokens_[i_];
      expect(":", key);
      if (key == "max_split_size_mb") {
        const auto mb = number(key);
        // The allocator refuses splits limits at or below its 20 MiB large segments.
        if (mb <= kCudaLargeBuffer / kMiB) bad_conf(what_, text_, "max_split_size_mb must be above 20");
        conf.max_split_size = mb * kMiB;
      } else if (key == "max_non_split_rounding_mb") {
        const auto mb = number(key);
        if (mb < kCudaLargeBuffer / kMiB) bad_conf(what_, text_, "max_non_split_rounding_mb must be at least 20");
        conf.max_non_split_rounding = mb * kMiB;
      } else if (key == "garbage_collection_threshold") {
        conf.garbage_collection_threshold = decimal(key);
        if (!(conf.garbage_collection_threshold > 0.0 && conf.garbage_collection_threshold < 1.0)) {
          bad_conf(what_, text_, "garbage_collection_threshold must be in (0, 1)");
        }
      } else if (key == "roundup_power2_divisions") {
        parse_divisions(conf);
      } else if (key == "expandable_segments") {
        conf.expandable_segments = boolean(key);
      } else if (key == "backend") {
        const auto value = word(key);
        if (value != "native" && value != "cudaMallocAsync")
          bad_conf(what_, text_, "backend is native or cudaMallocAsync");
        conf.async_backend = value == "cudaMallocAsync";
      } else if (key == "release_lock_on_cudamalloc" || key == "pinned_use_cuda_host_register" ||
                 key == "pinned_use_background_threads" || key == "graph_capture_record_stream_reuse") {
        boolean(key);  // host-side or locking behaviour: no effect on device memory
      } else if (key == "pinned_num_register_threads" || key == "pinned_reserve_segment_size_mb") {
        number(key);
      } else {
        bad_conf(what_, text_, "unknown key '" + key + "'");
      }
      if (i_ + 1 < tokens_.size()) expect(",", key);
    }
    return conf;
  }

 private:
  void expect(const char* token, const std::string& after) {
    if (++i_ >= tokens_.size() || tokens_[i_] != token) {
      bad_conf(what_, text_, std::string("expected '") + token + "' after '" + after + "'");
    }
  }
  const std::string& word(const std::string& key) {
    if (++i_ >= tokens_.size()) bad_conf(what_, text_, "missing value of " + key);
    return tokens_[i_];
  }
  std::uint64_t number(const std::string& key) {
    const auto& w = word(key);
    if (w.empty() || !std::all_of(w.begin(), w.end(), [](unsigned char c) { return std::isdigit(c); })) {
      bad_conf(what_, text_, key + " needs a whole number, not '" + w + "'");
    }
    return std::stoull(w);
  }
  double decimal(const std::string& key) {
    const auto& w = word(key);
    char* end = nullptr;
    const double v = std::strtod(w.c_str(), &end);
    if (end == w.c_str() || *end != '\0') bad_conf(what_, text_, key + " needs a number, not '" + w + "'");
    return v;
  }
  bool boolean(const std::string& key) {
    const auto& w = word(key);
    if (w == "True" || w == "true" || w == "1") return true;
    if (w == "False" || w == "false" || w == "0") return false;
    bad_conf(what_, text_, key + " is True or False, not '" + w + "'");
  }
  // "N" for every size, or "[256:1,512:2,>:4]": from a power-of-two size in MiB upwards; the first entry also
  // covers the sizes below it, ">" every interval after the last one named.
  void parse_divisions(CudaAllocConf& conf) {
    auto& d = conf.roundup_power2_divisions;
    if (i_ + 1 < tokens_.size() && tokens_[i_ + 1] != "[") {
      const auto v = number("roundup_power2_divisions");
      if (!is_power_of_two(v)) bad_conf(what_, text_, "roundup_power2_divisions must be a power of two");
      d.fill(v);
      return;
    }
    expect("[", "roundup_power2_divisions");
    bool first = true;
    std::size_t last_index = 0;
    while (++i_ < tokens_.size() && tokens_[i_] != "]") {
      const std::string boundary = tokens_[i_];
      expect(":", boundary);
      const auto v = number("roundup_power2_divisions");
      if (v != 0 && !is_power_of_two(v)) bad_conf(what_, text_, "roundup_power2_divisions must be powers of two or 0");
      if (boundary == ">") {
        std::fill(d.begin() + static_cast<std::ptrdiff_t>(std::min(last_index + 1, d.size())), d.end(), v);
      } else {
        if (!std::all_of(boundary.begin(), boundary.end(), [](unsigned char c) { return std::isdigit(c); }) ||
            !is_power_of_two(std::stoull(boundary))) {
          bad_conf(what_, text_, "roundup_power2_divisions intervals are powers of two (MiB), not '" + boundary + "'");
        }
        const auto index =
            std::min<std::size_t>(static_cast<std::size_t>(floor_log2(std::stoull(boundary))), d.size() - 1);
        if (first) std::fill(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(index), v);
        first = false;
        d[index] = v;
        last_index = index;
      }
      if (i_ + 1 < tokens_.size() && tokens_[i_ + 1] != "]") expect(",", boundary);
    }
    if (i_ >= tokens_.size()) bad_conf(what_, text_, "missing ']' after roundup_power2_divisions");
  }

  std::string text_;
  std::string what_;
  std::vector<std::string> tokens_;
  std::size_t i_ = 0;
};

}  // namespace

CudaAllocConf parse_cuda_alloc_conf(const std::string& text, const std::string& what) {
  return ConfParser(text, what).parse();
}

}  // namespace fitsum::util
