// Where a model comes from for training or evaluation, as run_summarization.py spells it: a pretrained folder
// (--model_name_or_path), or a config for random initialisation (--config_name) with a tokenizer folder
// (--tokenizer_name); --config_overrides edits config fields at load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "fitsum/io/checkpoint.h"
#include "fitsum/model/seq2seq.h"

namespace fitsum::io {

struct ModelSource {
  std::string model_name_or_path;  // an HF model folder (config.json + weights)
  std::string config_name;         // a config.json (or a folder holding one) for random initialisation
  std::string tokenizer_name;      // a folder with spiece.model or tokenizer.json; defaults to the model's folder
  std::string config_overrides;    // "dropout=0.0,attention_dropout=0.0"
};

struct LoadedModel {
  model::Seq2SeqLM model{nullptr};
  nlohmann::json config_json;           // after overrides: what saved folders carry
  std::filesystem::path tokenizer_dir;  // empty when neither spiece.model nor tokenizer.json was found
  bool random_init = false;
  LoadReport report;
  std::string description;  // one line for the log
};

// Throws std::invalid_argument when neither or both sources are given, std::runtime_error for bad folders.
LoadedModel load_model(const ModelSource& source, std::uint64_t init_seed);

// What load_model will build, found without reading or allocating any weight: the config (config.json plus
// config_overrides) and the tokenizer folder. For checks that belong before the model loads (the free disk for a
// checkpoint, the memory planner's weights, gradients and optimizer state against the budget). Throws what load_model throws for the same source, short of errors in the weights themselves.
struct ModelPreview {
  model::ModelConfig config;
  nlohmann::json config_json;           // after overrides, as LoadedModel's
  std::filesystem::path tokenizer_dir;  // empty when neither spiece.model nor tokenizer.json was found
  std::string description;              // where the config comes from, for the log
};
ModelPreview preview_model(const ModelSource& source);

}  // namespace fitsum::io
