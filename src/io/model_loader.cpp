// Implements include/fitsum/io/model_loader.h.
#include "fitsum/io/model_loader.h"

#include <stdexcept>

#include "fitsum/io/hf_config.h"
#include "fitsum/io/hub.h"
#include "fitsum/tokenizer/tokenizer.h"
#include "fitsum/util/files.h"

namespace fitsum::io {

namespace fs = std::filesystem;

namespace {

// A source resolved up to its weights: the config it builds and where its tokenizer is.
struct ResolvedSource {
  bool pretrained = false;
  ModelFolder folder;  // pretrained only
  fs::path config_file;
  nlohmann::json config_json;  // after overrides
  model::ModelConfig config;
  fs::path tokenizer_dir;  // empty when no tokenizer files were found
  std::string model_from;  // the pretrained model's name, and its folder when that differs (a Hub id's snapshot)
};

// "google/pegasus-cnn_dailymail (<snapshot folder>)" for a Hub id's folder in the cache, the folder alone otherwise.
std::string where(const std::string& requested, const std::string& folder) {
  if (requested != folder) return requested + " (" + folder + ")";
  const auto id = repo_id_of_snapshot(folder);
  return id ? *id + " (" + folder + ")" : folder;
}

ResolvedSource resolve_source(const ModelSource& requested) {
  ResolvedSource r;
  r.pretrained = !requested.model_name_or_path.empty();
  if (r.pretrained == !requested.config_name.empty()) {
    throw std::invalid_argument(
        "give either model_name_or_path DIR (a Hugging Face model folder) or config_name config.json (random "
        "initialisation, with tokenizer_name DIR)");
  }
  const ModelSource source = resolve_model_source(requested);  // Hub ids to cache folders, once the usage is right
  r.model_from = where(requested.model_name_or_path, source.model_name_or_path);
  if (r.pretrained) {
    r.folder = open_model_folder(source.model_name_or_path);
    if (!r.folder.has_weights()) {
      throw std::runtime_error("'" + source.model_name_or_path +
                               "' holds no weights; to start from random weights pass its config.json as "
                               "config_name instead");
    }
    r.config_json = r.folder.config_json;
    r.config_file = r.folder.dir / "config.json";
  } else {
    std::error_code error;  // a link loop or a missing path: read_json_file names it in one line
    r.config_file = fs::is_directory(source.config_name, error) ? fs::path(source.config_name) / "config.json"
                                                                : fs::path(source.config_name);
    r.config_json = util::read_json_file(r.config_file);
  }
  if (!source.config_overrides.empty()) {
    apply_config_overrides(r.config_json, source.config_overrides);
  }
  r.config = model_config_from_hf(r.config_json, r.config_file.string());
  const fs::path tokenizer_dir = !source.tokenizer_name.empty() ? fs::path(source.tokenizer_name)
                                 : r.pretrained                 ? fs::path(source.model_name_or_path)
                                                                : r.config_file.parent_path();
  const bool has_tokenizer = tokenizer::has_tokenizer(tokenizer_dir);
  if (!source.tokenizer_name.empty() && !has_tokenizer) {
    throw std::runtime_error("tokenizer_name '" + where(requested.tokenizer_name, source.tokenizer_name) + "' has no " +
                             tokenizer::kTokenizerFiles);
  }
  if (has_tokenizer) r.tokenizer_dir = tokenizer_dir;
  return r;
}

}  // namespace

LoadedModel load_model(const ModelSource& source, std::uint64_t init_seed) {
  auto resolved = resolve_source(source);
  LoadedModel loaded;
  if (!source.adapter_name_or_path.empty()) {  // the adapter's config is checked before any weight is read
    if (!resolved.pretrained) {
      throw std::invalid_argument("adapter_name_or_path adds an adapter to pretrained weights: give its base model as "
                                  "model_name_or_path, not config_name");
    }
    loaded.adapter = open_adapter_folder(source.adapter_name_or_path);
  }
  loaded.config_json = std::move(resolved.config_json);
  loaded.tokenizer_dir = resolved.tokenizer_dir;
  loaded.model = model::Seq2SeqLM(resolved.config);
  if (resolved.pretrained) {
    resolved.folder.config = resolved.config;
    loaded.report = load_weights(*loaded.model, resolved.folder);
    loaded.description =
        "pretrained weights from " + resolved.model_from + " (" + resolved.folder.describe_weights() + ")";
  } else {
    model::init_weights(*loaded.model, init_seed);
    loaded.random_init = true;
    loaded.description = "random initialisation from " + resolved.config_file.string() + " (seed " +
                         std::to_string(init_seed) + ")";
  }
  if (loaded.adapter) {
    load_adapter(*loaded.model, *loaded.adapter);
    loaded.description += ", LoRA adapter from " + source.adapter_name_or_path + " (r=" +
                          std::to_string(loaded.adapter->config.r) + ", " +
                          loaded.adapter->weights_file.filename().string() + ")";
  }
  return loaded;
}

ModelPreview preview_model(const ModelSource& source) {
  auto resolved = resolve_source(source);
  const auto from = resolved.pretrained ? resolved.model_from : resolved.config_file.string();
  return {std::move(resolved.config), std::move(resolved.config_json), std::move(resolved.tokenizer_dir),
          "the config of " + from + " (no weights read: planning needs the config only)"};
}

}  // namespace fitsum::io
