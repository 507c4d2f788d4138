// Hugging Face model folders: config.json plus weights in model.safetensors, pytorch_model.bin (torch.save zip), or
// sharded variants listed by *.index.json. Loading validates every tensor against the model built from the config
// and names what is missing, unexpected or mis-shaped; saving writes what HF's save_pretrained writes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "fitsum/model/config.h"

namespace fitsum::model {
class Seq2SeqLMImpl;
}

namespace fitsum::io {

namespace fs = std::filesystem;

enum class WeightFormat { none, safetensors, pytorch_bin };

// What a model folder holds, found without reading any tensor data.
struct ModelFolder {
  fs::path dir;
  nlohmann::json config_json;
  model::ModelConfig config;
  WeightFormat format = WeightFormat::none;
  std::vector<fs::path> weight_files;  // one file, or the shards named by the index
  fs::path index_file;                 // set for sharded checkpoints

  bool has_weights() const { return format != WeightFormat::none; }
  std::string describe_weights() const;
};

// Reads DIR/config.json and locates the weights (safetensors preferred, as HF does). Throws std::runtime_error
// naming the folder when there is no config.json, or when an index names shards that do not exist.
ModelFolder open_model_folder(const fs::path& dir);

// Names, shapes and dtypes of stored tensors, and reading them one at a time (so a 2 GB checkpoint is never held
// twice in memory).
class TensorSource {
 public:
  struct Info {
    std::string name;
    std::vector<std::int64_t> shape;
    std::string dtype;
    std::string file;
  };
  virtual ~TensorSource() = default;
  virtual const std::vector<Info>& tensors() const = 0;
  virtual at::Tensor read(const std::string& name, at::ScalarType dtype) const = 0;
};
std::unique_ptr<TensorSource> open_tensor_source(const ModelFolder& folder);

struct LoadReport {
  std::int64_t tensors_loaded = 0;
  std::uint64_t bytes_read = 0;
  std::vector<std::string> computed;         // absent from the file and computed (sinusoidal tables) or zero-filled
  std::vector<std::string> tied_duplicates;  // lm_head / embed_tokens copies of model.shared.weight
  std::vector<std::string> warnings;
};

// Copies the folder's weights into `model`, converting F32/F16/BF16/F64 to the model's dtype. Every mismatch is
// collected and reported together in one std::runtime_error naming each tensor with expected vs found shape.
LoadReport load_weights(model::Seq2SeqLMImpl& model, const ModelFolder& folder);

// The tensors HF's save_pretrained writes for this model: parameters and persistent buffers under their HF names,
// with the tied duplicates (lm_head.weight, model.{encoder,decoder}.embed_tokens.weight) left out.
std::vector<std::pair<std::string, at::Tensor>> checkpoint_tensors(model::Seq2SeqLMImpl& model);

struct SaveOptions {
  nlohmann::json config_json;        // the original config.json, kept field by field; empty: derived
  nlohmann::json generation_config;  // empty: derived from config_json
  fs::path copy_tokenizer_from;      // a folder whose tokenizer files (spiece.model, ...) are copied along
};

// Writes out_dir/{model.safetensors, config.json, generation_config.json} (+ tokenizer files), each atomically.
void save_model_folder(model::Seq2SeqLMImpl& model, const fs::path& out_dir, const SaveOptions& options = {});

// The tokenizer files HF keeps beside a model.
const std::vector<std::string>& tokenizer_file_names();

// Copies the tokenizer files `from` holds into `out_dir` (each atomically); nothing when `from` is empty or is
// `out_dir`.
void copy_tokenizer_files(const fs::path& from, const fs::path& out_dir);

}  // namespace fitsum::io
