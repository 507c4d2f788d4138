// The planner's accuracy check, shared by the default subset (tests/model/planner_test.cpp) and the full grid
// (tests/slow/planner_grid_test.cpp): predict a configuration's peak from the calibration probe, then train two
// real optimizer steps of it with the Trainer and measure the peak exactly with the tracking allocator.
#pragma once

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "fitsum/io/model_loader.h"
#include "fitsum/memory/lora_memory.h"
#include "fitsum/memory/planner.h"
#include "fitsum/memory/tracking_allocator.h"
#include "fitsum/train/trainer.h"
#include "test_support.h"

namespace fitsum::test {

// Random-init layouts with a shrunk vocabulary, so a grid cell trains in about a second: PEGASUS's unless `config`
// names another family's config.json (relative to the source folder). With `lora` (r > 0) the model trains low-rank
// adapters as `--lora_r` does (memory::apply_planned_lora), its frozen base in bfloat16 with `base_bfloat16`.
struct GridModel {
  std::string name;
  std::string overrides;
  std::string config = "configs/pegasus-tiny/config.json";
  model::LoraConfig lora{};
  bool base_bfloat16 = false;
};

// `m` training adapters of rank `r` on `targets` (empty: the family's default), named after them.
inline GridModel with_lora(GridModel m, std::int64_t r, std::vector<std::string> targets, bool base_bfloat16) {
  m.name += " lora r" + std::to_string(r) + " " + (targets.empty() ? std::string("default") : targets.front()) +
            (base_bfloat16 ? " bf16-base" : "");
  m.lora.r = r;
  m.lora.target_modules = std::move(targets);
  m.base_bfloat16 = base_bfloat16;
  return m;
}

inline GridModel grid_model_small() {
  return {"d128-L2",
          "vocab_size=8000,d_model=128,encoder_layers=2,decoder_layers=2,encoder_ffn_dim=512,"
          "decoder_ffn_dim=512,encoder_attention_heads=4,decoder_attention_heads=4"};
}
inline GridModel grid_model_large() {
  return {"d256-L4",
          "vocab_size=16000,d_model=256,encoder_layers=4,decoder_layers=4,encoder_ffn_dim=1024,"
          "decoder_ffn_dim=1024,encoder_attention_heads=8,decoder_attention_heads=8"};
}
// BART's layout (post-LayerNorm, layernorm_embedding, learned positions, biases) at the small model's sizes.
inline GridModel grid_model_bart_small() {
  return {"bart-d128-L2",
          "vocab_size=8000,d_model=128,encoder_layers=2,decoder_layers=2,encoder_ffn_dim=512,"
          "decoder_ffn_dim=512,encoder_attention_heads=4,decoder_attention_heads=4",
          "configs/bart-base/config.json"};
}
// T5's layout (RMSNorm, no biases, relative position bias, d_kv) at the small model's sizes: v1.0 (relu, tied head)
// and v1.1 / FLAN-T5 (gated-gelu, untied head).
inline GridModel grid_model_t5_small() {
  // num_decoder_layers too: T5Config sets it from config.json's num_layers (6) before the override.
  return {"t5-d128-L2", "vocab_size=8000,d_model=128,d_kv=32,d_ff=512,num_layers=2,num_decoder_layers=2,num_heads=4",
          "configs/t5-small/config.json"};
}
inline GridModel grid_model_flan_t5_small() {
  return {"flan-t5-d128-L2",
          "vocab_size=8000,d_model=128,d_kv=32,d_ff=512,num_layers=2,num_decoder_layers=2,num_heads=4",
          "configs/flan-t5-base/config.json"};
}
// The real PEGASUS vocabulary (96103 tokens: the LM head and its loss dominate the transient).
inline GridModel grid_model_real_vocab() {
  return {"d256-L4-V96103",
          "vocab_size=96103,d_model=256,encoder_layers=4,decoder_layers=4,encoder_ffn_dim=1024,"
          "decoder_ffn_dim=1024,encoder_attention_heads=8,decoder_attention_heads=8"};
}
// pegasus-large's widths (d_model 1024, ffn 4096, 16 heads, 96103 tokens) at a reduced depth.
inline GridModel grid_model_large_shaped() {
  return {"large-L3",
          "vocab_size=96103,d_model=1024,encoder_layers=3,decoder_layers=3,encoder_ffn_dim=4096,"
          "decoder_ffn_dim=4096,encoder_attention_heads=16,decoder_attention_heads=16"};
}

// The long-input encoders at reduced widths, with their real block structure: PEGASUS-X's staggered block-local
// attention with global tokens (pegasus-x-large's config: blocks of 512, 128 global tokens, every odd layer
// staggered), LongT5's transient-global attention (long-t5-tglobal-base's layout: windows of 3 x 128 positions, one
// side key per 16 positions, gated-gelu, untied head). Four encoder layers, so that a full depth mixes both kinds of
// PEGASUS-X layer and LongT5's later blocks take the first block's position bias.
inline GridModel grid_model_pegasus_x_small() {
  return {"pegasus-x-d128-L4",
          "vocab_size=8000,d_model=128,encoder_layers=4,decoder_layers=2,encoder_ffn_dim=512,decoder_ffn_dim=512,"
          "encoder_attention_heads=4,decoder_attention_heads=4",
          "configs/pegasus-x-large/config.json"};
}
inline GridModel grid_model_long_t5_small() {
  return {"longt5-tglobal-d128-L4",
          "vocab_size=8000,d_model=128,d_kv=32,d_ff=512,num_layers=4,num_decoder_layers=2,num_heads=4",
          "tests/data/configs/longt5-tglobal/config.json"};
}

// Checkpointing of a grid cell: the bottom `encoder` / `decoder` layers; kAll for a whole stack.
constexpr std::int64_t kAll = std::numeric_limits<std::int64_t>::max();
struct GridCheckpointing {
  std::int64_t encoder = 0;
  std::int64_t decoder = 0;
};
inline const GridCheckpointing kNone{0, 0};
inline const GridCheckpointing kEvery{kAll, kAll};

inline model::Seq2SeqLM make_grid_model(const GridModel& m) {
  io::ModelSource source;
  source.config_name = (source_dir() / m.config).string();
  source.config_overrides = m.overrides;
  return io::load_model(source, 7).model;
}

// `count` examples of exactly `source` and `target` tokens (eos last): every batch is the worst batch.
inline std::vector<data::Example> fixed_length_examples(std::int64_t count, std::int64_t source, std::int64_t target,
                                                        std::int64_t vocab) {
  std::vector<data::Example> out;
  for (std::int64_t i = 0; i < count; ++i) {
    data::Example e;
    e.line = static_cast<std::size_t>(i + 1);
    for (std::int64_t j = 0; j + 1 < source; ++j)
      e.input_ids.push_back(static_cast<data::TokenId>(2 + (i * 31 + j * 7) % (vocab - 2)));
    e.input_ids.push_back(1);
    std::vector<data::TokenId> labels;
    for (std::int64_t j = 0; j + 1 < target; ++j)
      labels.push_back(static_cast<data::TokenId>(2 + (i * 17 + j * 5) % (vocab - 2)));
    labels.push_back(1);
    e.labels = labels;
    out.push_back(e);
  }
  return out;
}

struct GridCell {
  std::string model;
  memory::PlanKnobs knobs;
  std::int64_t source = 0;
  std::int64_t target = 0;
  std::uint64_t predicted = 0;
  std::uint64_t measured = 0;
  double error() const {
    return (static_cast<double>(predicted) - static_cast<double>(measured)) / static_cast<double>(measured);
  }
};

// Measured peak of two optimizer steps, counted from `baseline` (the allocator's bytes before the model existed).
inline std::uint64_t measure_training_peak(model::Seq2SeqLM model, const memory::PlanKnobs& knobs, std::int64_t source,
                                           std::int64_t target, std::int64_t baseline, const fs::path& output_dir) {
  train::TrainingArguments args;
  args.output_dir = output_dir.string();
  args.overwrite_output_dir = true;
  args.max_steps = 2;
  args.logging_steps = 1;
  args.save_strategy = train::IntervalStrategy::no;
  args.per_device_train_batch_size = knobs.micro_batch;
  args.gradient_accumulation_steps = knobs.accumulation;
  args.set_checkpointed_layers(knobs.encoder_checkpointed, knobs.decoder_checkpointed);
  args.optim = knobs.optimizer;
  train::TrainerInputs inputs;
  inputs.model = model;
  inputs.train_examples =
      fixed_length_examples(2 * knobs.micro_batch * knobs.accumulation, source, target, model->config().vocab_size);
  std::int64_t peak = 0;
  train::TrainerCallbacks callbacks;
  callbacks.on_log = [&peak](const nlohmann::ordered_json& entry) {
    if (entry.contains("peak_memory_bytes")) peak = std::max(peak, entry["peak_memory_bytes"].get<std::int64_t>());
  };
  train::Trainer trainer(args, std::move(inputs), callbacks);
  trainer.train();
  return static_cast<std::uint64_t>(peak - baseline);
}

// Predicts and measures every combination for one model; each cell is appended to `cells`.
inline void run_grid(const GridModel& m, const std::vector<std::int64_t>& micro_batches,
                     const std::vector<std::int64_t>& sources, std::int64_t target,
                     const std::vector<GridCheckpointing>& checkpointing,
                     const std::vector<optim::OptimizerType>& optimizers,
                     std::vector<GridCell>& cells) {
  auto& allocator = memory::TrackingCpuAllocator::instance();
  const auto baseline = allocator.current_bytes();
  auto model = make_grid_model(m);
  if (m.lora.enabled()) memory::apply_planned_lora(*model, m.lora, m.base_bfloat16);
  memory::CalibrationOptions options;
  options.max_source_length = *std::max_element(sources.begin(), sources.end());
  options.max_target_length = target;
  options.lora = m.lora;
  options.base_bfloat16 = m.base_bfloat16;
  const auto calibration = memory::calibrate(*model, options);
  const auto dir = temp_dir("grid-" + m.name);
  for (const auto s : sources) {
    for (const auto mb : micro_batches) {
      for (const auto& ck : checkpointing) {
        for (const auto kind : optimizers) {
          GridCell cell;
          cell.model = m.name;
          cell.source = s;
          cell.target = target;
          cell.knobs.micro_batch = mb;
          cell.knobs.accumulation = 1;
          cell.knobs.encoder_checkpointed = std::min(ck.encoder, model->config().encoder_layers);
          cell.knobs.decoder_checkpointed = std::min(ck.decoder, model->config().decoder_layers);
          cell.knobs.optimizer = kind;
          cell.predicted = memory::predict(calibration, cell.knobs, {mb, s, target}).peak;
          cell.measured = measure_training_peak(model, cell.knobs, s, target, baseline, dir);
          model->set_gradient_checkpointing(0, 0);
          cells.push_back(cell);
          std::fprintf(stderr, "grid cell %zu: %s micro-batch %lld source %lld checkpointed %lld+%lld %s: %+.2f%%\n",
                       cells.size(), m.name.c_str(), static_cast<long long>(mb), static_cast<long long>(s),
                       static_cast<long long>(cell.knobs.encoder_checkpointed),
                       static_cast<long long>(cell.knobs.decoder_checkpointed), optim::to_string(kind),
                       100.0 * cell.error());
        }
      }
    }
  }
}

inline void print_grid(const std::vector<GridCell>& cells) {
  std::printf(
      "| model | micro-batch | source x target | checkpointed enc+dec | optimizer | predicted MiB | measured MiB | error "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const auto& c : cells) {
    std::printf("| %s | %lld | %lld x %lld | %lld+%lld | %s | %.2f | %.2f | %+.2f%% |\n", c.model.c_str(),
                static_cast<long long>(c.knobs.micro_batch), static_cast<long long>(c.source),
                static_cast<long long>(c.target), static_cast<long long>(c.knobs.encoder_checkpointed),
                static_cast<long long>(c.knobs.decoder_checkpointed),
                optim::to_string(c.knobs.optimizer), static_cast<double>(c.predicted) / 1048576.0,
                static_cast<double>(c.measured) / 1048576.0, 100.0 * c.error());
  }
  std::fflush(stdout);
}

}  // namespace fitsum::test
