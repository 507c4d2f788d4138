// LoRA adapter folders as PEFT's `PeftModel.save_pretrained` writes them and `PeftModel.from_pretrained` reads them:
//   adapter_config.json        LoraConfig's fields (json.dumps(indent=2, sort_keys=True), no final newline)
//   adapter_model.safetensors  the adapter's tensors under "base_model.model.<parameter name>", {"format": "pt"}
// (or adapter_model.bin, torch.save of the same dict, which PEFT writes with safe_serialization=False). The names
// are the model's parameter names (model/lora.h) with one exception PEFT's wrapper makes: the bias of an adapted
// Linear is saved as "<layer>.base_layer.bias". modules_to_save are saved under their own names.
//
// Reading trusts nothing: the config's fields are checked for type and range, LoRA variants fitsum does not compute
// (DoRA, rank or alpha patterns, fan_in_fan_out, ...) are refused by their field name, and every tensor's name and
// shape is compared with the adapters the config builds before any tensor is copied. Errors are std::runtime_error
// naming the file and the field or tensor.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "fitsum/io/checkpoint.h"
#include "fitsum/model/lora.h"

namespace fitsum::model {
class Seq2SeqLMImpl;
}

namespace fitsum::io {

namespace fs = std::filesystem;

inline constexpr const char* kAdapterConfigName = "adapter_config.json";
inline constexpr const char* kAdapterWeightsName = "adapter_model.safetensors";
inline constexpr const char* kAdapterBinName = "adapter_model.bin";

// What adapter_config.json says of the base model, as the user named it.
struct AdapterBase {
  std::string base_model_name_or_path;  // written as null when empty
  std::string revision;                 // of a Hub id; null when empty
};

// PEFT's key for a parameter of `model` (which has its adapters): "base_model.model." + name, and
// "<layer>.base_layer.bias" for the bias of an adapted layer.
std::string peft_key(model::Seq2SeqLMImpl& model, const std::string& parameter_name);

// adapter_config.json's content for `config` applied to `model`: every field PEFT's LoraConfig writes. target_modules
// is what PEFT keeps after get_peft_model: the entries given, each once, or for all-linear and for the family's
// default the last names of the layers adapted, sorted (PEFT keeps them as a set and writes its hash order, which
// differs from run to run).
nlohmann::json adapter_config_json(model::Seq2SeqLMImpl& model, const model::LoraConfig& config,
                                   const AdapterBase& base);
// The file's text, byte for byte what Python's json.dumps(indent=2, sort_keys=True) makes of it.
std::string adapter_config_text(const nlohmann::json& config);

// Writes dir/adapter_config.json and dir/adapter_model.safetensors (lora_state's tensors under PEFT's keys), each
// atomically; creates `dir` when missing.
void save_adapter(model::Seq2SeqLMImpl& model, const model::LoraConfig& config, const fs::path& dir,
                  const AdapterBase& base);

// An adapter folder, its config read and checked, no tensor read.
struct AdapterFolder {
  fs::path dir;
  fs::path config_file;
  model::LoraConfig config;
  AdapterBase base;
  WeightFormat format = WeightFormat::none;
  fs::path weights_file;  // adapter_model.safetensors, else adapter_model.bin
};

// Whether `dir` holds an adapter_config.json (a LoRA run's output folder or checkpoint).
bool is_adapter_folder(const fs::path& dir);

// Reads and checks DIR/adapter_config.json and finds the weights. Throws std::runtime_error naming the folder or the
// file and field.
AdapterFolder open_adapter_folder(const fs::path& dir);

// The LoraConfig of an adapter_config.json's content; `file` names it in errors.
model::LoraConfig parse_adapter_config(const nlohmann::json& config, const fs::path& file);

// Adds the folder's adapters to `model` (model::apply_lora with its config) and copies its tensors in: the
// adapter's A and B, and the biases and modules_to_save it carries, which replace the base model's. Every stored
// tensor is checked first (names, shapes, floating dtypes; none missing, none unexpected): a mismatch is one
// std::runtime_error naming the file and each tensor. The model keeps requires_grad as apply_lora sets it.
void load_adapter(model::Seq2SeqLMImpl& model, const AdapterFolder& folder);

// The same into a model that already has the folder's adapters (a resumed run): only the tensors are copied.
void load_adapter_weights(model::Seq2SeqLMImpl& model, const AdapterFolder& folder);

}  // namespace fitsum::io
