// Implements include/fitsum/io/model_loader.h.
#include "fitsum/io/model_loader.h"

#include <stdexcept>

#include "fitsum/io/hf_config.h"
#include "fitsum/util/files.h"

namespace fitsum::io {

namespace fs = std::filesystem;

namespace {

// The config a source names, after overrides, and where it came from; no weights are read.
struct SourceConfig {
  nlohmann::json config_json;
  fs::path config_file;
  ModelFolder folder;  // a pretrained source's folder
  model::ModelConfig config;
};

SourceConfig read_source_config(const ModelSource& source) {
  const bool pretrained = !source.model_name_or_path.empty();
  const bool from_config = !source.config_name.empty();
  if (pretrained == from_config) {
    throw std::invalid_argument(
        "give either model_name_or_path DIR (a Hugging Face model folder) or config_name config.json (random "
        "initialisation, with tokenizer_name DIR)");
  }
  SourceConfig out;
  if (pretrained) {
    out.folder = open_model_folder(source.model_name_or_path);
    if (!out.folder.has_weights()) {
      throw std::runtime_error("'" + source.model_name_or_path +
                               "' holds no weights; to start from random weights pass its config.json as "
                               "config_name instead");
    }
    out.config_json = out.folder.config_json;
    out.config_file = out.folder.dir / "config.json";
  } else {
    out.config_file = fs::is_directory(source.config_name) ? fs::path(source.config_name) / "config.json"
                                                           : fs::path(source.config_name);
    out.config_json = util::read_json_file(out.config_file);
  }
  if (!source.config_overrides.empty()) apply_config_overrides(out.config_json, source.config_overrides);
  out.config = model_config_from_hf(out.config_json, out.config_file.string());
  return out;
}

}  // namespace

model::ModelConfig read_model_config(const ModelSource& source) { return read_source_config(source).config; }

LoadedModel load_model(const ModelSource& source, std::uint64_t init_seed) {
  const bool pretrained = !source.model_name_or_path.empty();
  auto read = read_source_config(source);
  LoadedModel loaded;
  loaded.config_json = std::move(read.config_json);
  const auto& config_file = read.config_file;
  auto& folder = read.folder;
  const auto& config = read.config;
  loaded.model = model::Seq2SeqLM(config);
  if (pretrained) {
    folder.config = config;
    loaded.report = load_weights(*loaded.model, folder);
    loaded.description =
        "pretrained weights from " + source.model_name_or_path + " (" + folder.describe_weights() + ")";
  } else {
    model::init_weights(*loaded.model, init_seed);
    loaded.random_init = true;
    loaded.description =
        "random initialisation from " + config_file.string() + " (seed " + std::to_string(init_seed) + ")";
  }
  const fs::path tokenizer_dir = !source.tokenizer_name.empty() ? fs::path(source.tokenizer_name)
                                 : pretrained                   ? fs::path(source.model_name_or_path)
                                                                : config_file.parent_path();
  if (!source.tokenizer_name.empty() && !fs::exists(tokenizer_dir / "spiece.model")) {
    throw std::runtime_error("tokenizer_name '" + source.tokenizer_name + "' has no spiece.model");
  }
  if (fs::exists(tokenizer_dir / "spiece.model")) loaded.tokenizer_dir = tokenizer_dir;
  return loaded;
}

}  // namespace fitsum::io
