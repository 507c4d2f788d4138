// `fitsum info --model DIR [--json] [--forward]`: what a model folder holds and what training it will cost before
// activations. With weights present they are loaded and validated (structure, offsets, every shape against the
// config); a folder holding only config.json is described from the config alone.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "commands.h"
#include "fitsum/io/checkpoint.h"
#include "fitsum/memory/static_memory.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/util/bytes.h"
#include "fitsum/util/runtime.h"
#include "hub_flags.h"

namespace fitsum::cli {

namespace {

struct InfoOptions {
  std::string model_dir;
  bool json = false;
  bool forward = false;
  std::string device = "cpu";  // where --forward runs
  io::ModelSource hub;           // --revision, --cache_dir, --token of a Hub id
};

nlohmann::ordered_json architecture_json(const model::ModelConfig& c) {
  nlohmann::ordered_json j = {{"model_type", c.model_type},
                              {"vocab_size", c.vocab_size},
                              {"d_model", c.d_model},
                              {"encoder_layers", c.encoder_layers},
                              {"decoder_layers", c.decoder_layers},
                              {"encoder_attention_heads", c.encoder_attention_heads},
                              {"decoder_attention_heads", c.decoder_attention_heads},
                              {"encoder_ffn_dim", c.encoder_ffn_dim},
                              {"decoder_ffn_dim", c.decoder_ffn_dim},
                              {"max_position_embeddings", c.max_position_embeddings},
                              {"activation_function", model::to_string(c.activation_function)},
                              {"scale_embedding", c.scale_embedding},
                              {"tie_word_embeddings", c.tie_word_embeddings},
                              {"dropout", c.dropout},
                              {"attention_dropout", c.attention_dropout},
                              {"activation_dropout", c.activation_dropout},
                              {"pad_token_id", c.pad_token_id},
                              {"eos_token_id", c.eos_token_id},
                              {"decoder_start_token_id", c.decoder_start_token_id}};
  const bool relative = c.position_embedding == model::PositionEmbedding::relative;
  if (relative) j["max_position_embeddings"] = nullptr;  // no table, no length limit
  if (c.module_layout == model::ModuleLayout::blocks) {  // the blocks' own head width and feed-forward variant
    j["d_kv"] = c.encoder_head_dim();
    j["gated_ffn"] = c.gated_ffn;
  }
  if (relative) {
    j["relative_attention_num_buckets"] = c.relative_attention_num_buckets;
    j["relative_attention_max_distance"] = c.relative_attention_max_distance;
  }
  // The long-input encoders: which attention, and the sizes that decide its memory and reach.
  if (c.encoder_attention == model::EncoderAttention::global_local) {
    j["encoder_attention"] = model::to_string(c.encoder_attention);
    j["block_size"] = c.block_size;
    j["num_global_tokens"] = c.num_global_tokens;
    j["stagger_local_blocks"] = c.stagger_local_blocks;
  } else if (c.encoder_attention != model::EncoderAttention::full) {
    j["encoder_attention"] = model::to_string(c.encoder_attention);
    j["local_radius"] = c.local_radius;
    if (c.encoder_attention == model::EncoderAttention::transient_global) j["global_block_size"] = c.global_block_size;
  }
  return j;
}

nlohmann::ordered_json memory_json(const model::ParameterCounts& counts) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (auto dtype : {memory::StorageDtype::fp32, memory::StorageDtype::bf16}) {
    const auto adamw = memory::static_training_memory(counts, optim::OptimizerType::adamw_torch, dtype);
    const auto adafactor = memory::static_training_memory(counts, optim::OptimizerType::adafactor, dtype);
    out[memory::to_string(dtype)] = {{"weights", adamw.weights},
                                     {"gradients", adamw.gradients},
                                     {"adamw_state", adamw.optimizer_state},
                                     {"adafactor_state", adafactor.optimizer_state},
                                     {"total_adamw", adamw.total()},
                                     {"total_adafactor", adafactor.total()}};
  }
  return out;
}

std::string with_commas(std::int64_t n) {
  std::string digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

// One forward pass on a fixed dummy batch (2 sequences, 32 source and 16 target tokens): proves the weights
// compute, and with random init the loss should be close to ln(vocab_size).
nlohmann::ordered_json forward_check(model::Seq2SeqLMImpl& model, const torch::Device& device) {
  const auto& c = model.config();
  torch::NoGradGuard no_grad;
  model.eval();
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1234);
  const std::int64_t low = std::min<std::int64_t>(c.vocab_size - 1, 3);
  auto source = torch::randint(low, c.vocab_size, {2, 32}, generator, torch::kLong);
  auto labels = torch::randint(low, c.vocab_size, {2, 16}, generator, torch::kLong);
  auto mask = torch::ones_like(source);
  model.to(device);
  source = source.to(device);  // drawn on the CPU: the same batch on every device
  labels = labels.to(device);
  mask = mask.to(device);
  const auto start = std::chrono::steady_clock::now();
  auto out = model.forward(source, mask, labels);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {{"batch", 2},
          {"source_length", 32},
          {"target_length", 16},
          {"loss", out.loss.item<double>()},
          {"uniform_loss", std::log(static_cast<double>(c.vocab_size))},
          {"seconds", seconds},
          {"device", device.str()}};
}

// The human-readable form of `fitsum info`'s JSON.
void print_info(const nlohmann::ordered_json& out, const model::ParameterCounts& counts, const std::string& model_dir) {
  const auto& weights = out["weights"];
  const nlohmann::ordered_json forward = out.contains("forward") ? out["forward"] : nlohmann::ordered_json(nullptr);
  std::cout << "model      " << model_dir << "\n";
  std::cout << "weights    "
            << (weights.is_null() ? std::string("none (config.json only)")
                                  : weights["files"].get<std::string>() + ": " +
                                        std::to_string(weights["tensors_loaded"].get<std::int64_t>()) +
                                        " tensors loaded and validated against config.json")
            << "\n";
  if (!weights.is_null()) {
    for (const auto& name : weights["computed"])
      std::cout << "           computed (not stored): " << name.get<std::string>() << "\n";
    for (const auto& w : weights["warnings"]) std::cout << "           warning: " << w.get<std::string>() << "\n";
  }
  std::cout << "\narchitecture\n";
  for (const auto& item : out["architecture"].items()) {
    std::printf("  %-26s %s\n", item.key().c_str(),
                item.value().is_string() ? item.value().get<std::string>().c_str() : item.value().dump().c_str());
  }
  std::cout << "\nparameters\n";
  std::printf("  %-26s %s\n", "trainable", with_commas(counts.trainable).c_str());
  std::printf("  %-26s %s  (final_logits_bias, sinusoidal position tables)\n", "not trained",
              with_commas(counts.frozen).c_str());
  std::printf("  %-26s %s\n", "total", with_commas(counts.total()).c_str());

  std::cout << "\ntraining memory before activations\n";
  std::printf("  %-26s %14s %14s\n", "", "fp32", "bf16");
  const auto& m = out["training_memory_bytes"];
  for (const char* key : {"weights", "gradients", "adamw_state", "adafactor_state", "total_adamw", "total_adafactor"}) {
    std::printf("  %-26s %14s %14s\n", key, util::format_bytes(m["fp32"][key].get<std::uint64_t>()).c_str(),
                util::format_bytes(m["bf16"][key].get<std::uint64_t>()).c_str());
  }
  std::cout << "  (bf16 = weights, gradients and AdamW state stored in bf16; HF's Adafactor keeps its state in fp32;\n"
               "   mixed precision with fp32 master weights (--bf16) needs the fp32 column plus smaller activations)\n";
  if (!forward.is_null()) {
    std::printf("\nforward pass (%s, batch 2 x 32 source / 16 target tokens): loss %.4f (uniform: %.4f) in %.3f s\n",
                forward["weights"].get<std::string>().c_str(), forward["loss"].get<double>(),
                forward["uniform_loss"].get<double>(), forward["seconds"].get<double>());
  }
}

void run_info(const InfoOptions& options) {
  const auto device = util::resolve_device(options.device);  // before any work
  // A Hub id's config and weights, from the cache or the Hub; the report still names the model as given.
  const io::HubFileSet files{true, false, true, false};
  const auto folder =
      io::open_model_folder(io::resolve_model_folder(options.model_dir, files, hub_options(options.hub)));
  const auto& c = folder.config;
  auto counts = model::count_parameters(c);

  nlohmann::ordered_json weights = nullptr;
  nlohmann::ordered_json forward = nullptr;
  if (folder.has_weights() || options.forward) {
    model::Seq2SeqLM model(c);
    if (folder.has_weights()) {
      const auto start = std::chrono::steady_clock::now();
      const auto report = io::load_weights(*model, folder);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      weights = {{"files", folder.describe_weights()},
                 {"validated", true},
                 {"tensors_loaded", report.tensors_loaded},
                 {"bytes_read", report.bytes_read},
                 {"computed", report.computed},
                 {"tied_duplicates", report.tied_duplicates},
                 {"warnings", report.warnings},
                 {"load_seconds", seconds}};
    } else {
      model::init_weights(*model, 42);
    }
    // The built model is the ground truth for the counts; the config arithmetic must agree with it.
    std::int64_t trainable = 0;
    std::int64_t frozen = 0;
    for (const auto& p : model->parameters()) trainable += p.numel();
    for (const auto& b : model->buffers()) frozen += b.numel();
    if (trainable != counts.trainable || frozen != counts.frozen) {
      throw std::logic_error("parameter count from the config (" + std::to_string(counts.trainable) +
                             ") differs from the built model (" + std::to_string(trainable) + ")");
    }
    if (options.forward) {
      forward = forward_check(*model, device);
      forward["weights"] = folder.has_weights() ? "loaded" : "random init (seed 42)";
    }
  }

  nlohmann::ordered_json out = {
      {"model", options.model_dir},
      {"architecture", architecture_json(c)},
      {"weights", weights},
      {"parameters", {{"trainable", counts.trainable}, {"frozen", counts.frozen}, {"total", counts.total()}}},
      {"training_memory_bytes", memory_json(counts)}};
  if (!forward.is_null()) out["forward"] = forward;
  if (options.json) {
    std::cout << out.dump(2) << std::endl;
    return;
  }

  print_info(out, counts, options.model_dir);
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  auto* cmd = app.add_subcommand("info",
                                 "Describe a Hugging Face model folder: architecture, parameter counts and "
                                 "the memory training needs; loads and validates the weights when present");
  cmd->add_option("--model,--model_name_or_path", options->model_dir,
                  "model folder (config.json [+ weights]), or Hub id (org/name)")
      ->required();
  add_hub_flags(*cmd, options->hub);
  cmd->add_flag("--json", options->json, "print JSON instead of a table");
  cmd->add_flag("--forward", options->forward,
                "also run one forward pass on a dummy batch (random init when the folder has no weights)");
  cmd->add_option("--device", options->device, "where --forward runs: cpu, cuda or auto")->capture_default_str();
  cmd->callback([options]() { run_info(*options); });
}

}  // namespace fitsum::cli
