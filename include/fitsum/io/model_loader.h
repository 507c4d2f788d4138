// Where a model comes from for training or evaluation, as run_summarization.py spells it: a pretrained folder
// (--model_name_or_path), or a config for random initialisation (--config_name) with a tokenizer folder
// (--tokenizer_name); --config_overrides edits config fields at load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "fitsum/io/adapter.h"
#include "fitsum/io/checkpoint.h"
#include "fitsum/model/seq2seq.h"

namespace fitsum::io {

// Each name may also be a Hub id ("org/name"), resolved in the Hugging Face cache (io/hub.h): load_model and
// preview_model resolve it themselves; callers that report downloads resolve first (resolve_model_source).
struct ModelSource {
  std::string model_name_or_path;  // an HF model folder (config.json + weights)
  std::string config_name;         // a config.json (or a folder holding one) for random initialisation
  std::string tokenizer_name;      // a folder with spiece.model or tokenizer.json; defaults to the model's folder
  std::string config_overrides;    // "dropout=0.0,attention_dropout=0.0"
  std::string revision;            // of Hub ids: a branch, tag or commit (empty: main)
  std::string cache_dir;           // of Hub ids: the cache (empty: HF_HUB_CACHE and its kin)
  std::string token;               // of Hub ids: the token (empty: HF_TOKEN or the token file)
  // A LoRA adapter folder (io/adapter.h: PEFT's save_pretrained, or a fitsum LoRA run) added to the pretrained model.
  std::string adapter_name_or_path;
};

struct LoadedModel {
  model::Seq2SeqLM model{nullptr};
  nlohmann::json config_json;           // after overrides: what saved folders carry
  std::filesystem::path tokenizer_dir;  // empty when neither spiece.model nor tokenizer.json was found
  bool random_init = false;
  LoadReport report;
  std::string description;  // one line for the log
  std::optional<AdapterFolder> adapter;  // the adapter added (adapter_name_or_path), its config and base
};

// Throws std::invalid_argument when neither or both sources are given (or an adapter without pretrained weights),
// std::runtime_error for bad folders and adapters.
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
