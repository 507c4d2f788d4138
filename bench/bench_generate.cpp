// Beam-search generation speed with and without the key/value cache, on a fixed batch of sources, for a checkpoint
// (--model DIR) or a randomly initialised model of a config (--config FILE, default configs/pegasus-tiny). Prints
// one JSON line per mode and a table with the cache's speed-up measured in the same run; not a pass/fail test.
// bench/bench_generate_eager.py runs the plain eager reference (../shared/reference/pegasus_ref.py beam_search) on
// the same checkpoint and inputs and prints the same fields (docs/generate.md shows the commands).
//
// The sources are made by a fixed integer recipe that the Python script repeats (make_sources), so both programs
// decode the same batch; `checksum` lets one see that they produced the same sequences.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fitsum/generate/generate.h"
#include "fitsum/io/checkpoint.h"
#include "fitsum/io/hf_config.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/util/files.h"
#include "fitsum/util/torch_compat.h"
// LibTorch 1.13's chrome://tracing recorder; newer LibTorch moved profiling to Kineto.
#define FITSUM_HAS_RECORD_PROFILE !FITSUM_TORCH_AT_LEAST(2, 0)
#if FITSUM_HAS_RECORD_PROFILE
#include <torch/csrc/autograd/profiler_legacy.h>
#endif

namespace {

using namespace fitsum;

// The bundled configs, found from the source folder when the build says where it is, else from the working folder.
#ifdef FITSUM_SOURCE_DIR
const char* const kDefaultConfig = FITSUM_SOURCE_DIR "/configs/pegasus-tiny/config.json";
#else
const char* const kDefaultConfig = "configs/pegasus-tiny/config.json";
#endif

struct BenchOptions {
  std::string model_dir;
  std::string config_file = kDefaultConfig;
  std::string save_model;
  std::int64_t batch = 4;
  std::int64_t src_len = 64;
  std::int64_t num_beams = 8;
  std::int64_t max_length = 32;
  std::int64_t min_length = 0;
  double length_penalty = 1.0;
  int repeats = 3;
  int threads = 1;
  std::uint64_t seed = 0;
  std::string profile;  // a chrome://tracing file of one more cached run
  bool cache_only = false;
};

// Row i has src_len - (i % 4) * (src_len / 8) tokens, the last one eos (1), then padding; tokens come from a
// 31-bit linear congruential generator, mapped above PEGASUS's 103 special ids. Mirrored in bench_generate_eager.py.
void make_sources(std::int64_t batch, std::int64_t src_len, std::int64_t vocab, torch::Tensor& ids,
                  torch::Tensor& mask) {
  ids = torch::zeros({batch, src_len}, torch::kLong);
  mask = torch::zeros({batch, src_len}, torch::kLong);
  auto id = ids.accessor<std::int64_t, 2>();
  auto m = mask.accessor<std::int64_t, 2>();
  const std::int64_t low = vocab > 104 ? 103 : 2;
  std::uint64_t state = 12345;
  for (std::int64_t i = 0; i < batch; ++i) {
    const std::int64_t length = std::max<std::int64_t>(2, src_len - (i % 4) * (src_len / 8));
    for (std::int64_t j = 0; j < length; ++j) {
      state = (1103515245u * state + 12345u) % 2147483648u;
      id[i][j] = j + 1 == length ? 1 : low + static_cast<std::int64_t>((state >> 8) % (vocab - low));
      m[i][j] = 1;
    }
  }
}

// Summary tokens: every token after the start token up to and including eos (pad after it is not generated).
std::int64_t generated_tokens(const torch::Tensor& sequences, std::int64_t eos) {
  std::int64_t total = 0;
  auto s = sequences.accessor<std::int64_t, 2>();
  for (std::int64_t b = 0; b < sequences.size(0); ++b) {
    std::int64_t t = 1;
    while (t < sequences.size(1) && s[b][t] != eos) ++t;
    total += std::min<std::int64_t>(t, sequences.size(1) - 1);
  }
  return total;
}

std::int64_t checksum(const torch::Tensor& sequences) {
  auto positions = torch::arange(1, sequences.size(1) + 1, torch::kLong);
  return (sequences * positions).sum().item<std::int64_t>();
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"Beam-search generation speed with and without the key/value cache"};
  app.add_option("--model", o.model_dir, "Hugging Face model folder (config.json + weights)");
  app.add_option("--config", o.config_file, "config.json of a randomly initialised model (when --model is not given)")
      ->capture_default_str();
  app.add_option("--save_model", o.save_model, "write the randomly initialised model here (for the eager baseline)");
  app.add_option("--batch", o.batch, "sources per generate call")->capture_default_str();
  app.add_option("--src_len", o.src_len, "longest source, in tokens")->capture_default_str();
  app.add_option("--num_beams", o.num_beams, "beams per source")->capture_default_str();
  app.add_option("--max_length", o.max_length, "decoder length limit, start token included")->capture_default_str();
  app.add_option("--min_length", o.min_length, "minimum decoder length")->capture_default_str();
  app.add_option("--length_penalty", o.length_penalty, "beam length penalty")->capture_default_str();
  app.add_option("--repeats", o.repeats, "timed runs per mode (median reported), after one warm-up")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "LibTorch intra-op threads")->capture_default_str();
  app.add_option("--seed", o.seed, "weight initialisation seed")->capture_default_str();
  app.add_option("--profile", o.profile,
                 "write LibTorch's trace of one more cached run to this file (bench/profile_summary.py sums it up)");
  app.add_flag("--cache_only", o.cache_only, "time the cached decoder only (no comparison without the cache)");
  CLI11_PARSE(app, argc, argv);

  try {
    at::set_num_threads(o.threads);
    model::ModelConfig config;
    nlohmann::json config_json;
    std::string source;
    std::unique_ptr<model::Seq2SeqLM> model;
    if (!o.model_dir.empty()) {
      auto folder = io::open_model_folder(o.model_dir);
      config = folder.config;
      config_json = folder.config_json;
      model = std::make_unique<model::Seq2SeqLM>(config);
      io::load_weights(**model, folder);
      source = o.model_dir;
    } else {
      config_json = util::read_json_file(o.config_file);
      config = io::model_config_from_hf(config_json, o.config_file);
      model = std::make_unique<model::Seq2SeqLM>(config);
      model::init_weights(**model, o.seed);
      source = o.config_file + " (random init, seed " + std::to_string(o.seed) + ")";
      if (!o.save_model.empty()) {
        io::SaveOptions save;
        save.config_json = config_json;
        io::save_model_folder(**model, o.save_model, save);
        std::cerr << "saved the random model to " << o.save_model << "\n";
      }
    }

    // The checkpoint's settings, then the benchmark's: explicit options win, as in HF.
    auto options = generate::generation_options_from_hf(config_json, nlohmann::json(), source);
    options.num_beams = o.num_beams;
    options.max_length = o.max_length;
    options.max_new_tokens.reset();
    options.min_length = o.min_length;
    options.length_penalty = o.length_penalty;
    options.early_stopping = generate::EarlyStopping::heuristic;
    options.no_repeat_ngram_size = 0;

    torch::Tensor ids, mask;
    make_sources(o.batch, o.src_len, config.vocab_size, ids, mask);
    std::cerr << "model " << source << "\noptions " << generate::to_json(options).dump() << "\n";

    nlohmann::json rows = nlohmann::json::array();
    std::vector<torch::Tensor> outputs;
    for (bool use_cache : {true, false}) {
      if (!use_cache && o.cache_only) break;
      options.use_cache = use_cache;
      generate::GenerationResult result = generate::generate(**model, ids, mask, options);  // warm-up
      std::vector<double> seconds;
      for (int r = 0; r < o.repeats; ++r) {
        const auto start = std::chrono::steady_clock::now();
        result = generate::generate(**model, ids, mask, options);
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      std::sort(seconds.begin(), seconds.end());
      const double median = seconds[seconds.size() / 2];
      const auto tokens = generated_tokens(result.sequences, options.eos_token_id);
      nlohmann::json row = {{"impl", "fitsum"},
                            {"use_cache", use_cache},
                            {"batch", o.batch},
                            {"src_len", o.src_len},
                            {"num_beams", o.num_beams},
                            {"max_length", o.max_length},
                            {"threads", o.threads},
                            {"seconds", median},
                            {"summaries_per_s", static_cast<double>(o.batch) / median},
                            {"tokens_per_s", static_cast<double>(tokens) / median},
                            {"generated_tokens", tokens},
                            {"decoder_steps", result.stats.decoder_steps},
                            {"decoded_rows", result.stats.decoded_rows},
                            {"checksum", checksum(result.sequences)}};
      std::cout << row.dump() << std::endl;
      rows.push_back(row);
      outputs.push_back(result.sequences);
    }

    if (!o.profile.empty()) {
#if FITSUM_HAS_RECORD_PROFILE
      options.use_cache = true;
      torch::autograd::profiler::RecordProfile record(o.profile);
      generate::generate(**model, ids, mask, options);
#else
      std::cerr << "bench_generate: --profile needs LibTorch 1.x's trace recorder; no trace written\n";
#endif
    }

    const bool same = o.cache_only || torch::equal(outputs[0], outputs[1]);
    std::printf("\n%-10s %10s %14s %12s %12s\n", "use_cache", "seconds", "summaries/s", "tokens/s", "checksum");
    for (const auto& row : rows) {
      std::printf("%-10s %10.4f %14.2f %12.1f %12lld\n", row["use_cache"].get<bool>() ? "true" : "false",
                  row["seconds"].get<double>(), row["summaries_per_s"].get<double>(), row["tokens_per_s"].get<double>(),
                  static_cast<long long>(row["checksum"].get<std::int64_t>()));
    }
    if (!o.cache_only) {
      std::printf("cache speed-up: %.2fx   same sequences with and without the cache: %s\n",
                  rows[1]["seconds"].get<double>() / rows[0]["seconds"].get<double>(), same ? "yes" : "NO");
    }
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "bench_generate: " << e.what() << "\n";
    return 1;
  }
}
