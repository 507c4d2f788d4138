// Implements include/fitsum/io/adapter.h.
#include "fitsum/io/adapter.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <torch/torch.h>

#include "fitsum/io/safetensors.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/util/files.h"
#include "fitsum/util/strings.h"

namespace fitsum::io {

namespace {

constexpr const char* kPrefix = "base_model.model.";
// The PEFT release whose LoraConfig fields adapter_config.json carries (PEFT reads files of other releases: fields it
// does not know are dropped with a warning, fields it misses take their defaults).
constexpr const char* kPeftVersion = "0.21.2";
// More than any published adapter uses (r = 8 to 256); bounds what a damaged config can make apply_lora allocate
// before the tensors' shapes are compared.
constexpr std::int64_t kMaxRank = std::int64_t{1} << 16;

using util::ends_with;

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

// The qualified names of the layers that carry an adapter.
std::set<std::string> adapted_layers(model::Seq2SeqLMImpl& model) {
  std::set<std::string> layers;
  const std::string suffix = ".lora_A.weight";
  for (const auto& item : model.named_parameters()) {
    if (ends_with(item.key(), suffix)) layers.insert(item.key().substr(0, item.key().size() - suffix.size()));
  }
  return layers;
}

std::string key_of(const std::set<std::string>& adapted, const std::string& name) {
  if (ends_with(name, ".bias") && adapted.count(name.substr(0, name.size() - 5))) {
    return kPrefix + name.substr(0, name.size() - 5) + ".base_layer.bias";
  }
  return kPrefix + name;
}

// The adapter's tensors under PEFT's keys.
std::vector<std::pair<std::string, at::Tensor>> peft_state(model::Seq2SeqLMImpl& model,
                                                           const model::LoraConfig& config) {
  const auto adapted = adapted_layers(model);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [name, tensor] : model::lora_state(model, config)) out.emplace_back(key_of(adapted, name), tensor);
  return out;
}

nlohmann::json target_modules_json(model::Seq2SeqLMImpl& model, const model::LoraConfig& config) {
  const bool expanded =
      config.target_modules.empty() || (config.target_modules.size() == 1 && config.target_modules[0] == "all-linear");
  if (expanded) {
    std::set<std::string> names;
    for (const auto& layer : model::lora_target_names(model, config)) names.insert(layer.substr(layer.rfind('.') + 1));
    return nlohmann::json(std::vector<std::string>(names.begin(), names.end()));
  }
  std::vector<std::string> names;  // each once, in the order given
  for (const auto& name : config.target_modules) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return nlohmann::json(names);
}

// PEFT's lora_alpha is an int; a whole number is written as one.
nlohmann::json number_json(double value) {
  if (std::floor(value) == value && std::fabs(value) < 9e15) return static_cast<std::int64_t>(value);
  return value;
}

[[noreturn]] void refuse_field(const fs::path& file, const std::string& field, const std::string& why) {
  throw std::runtime_error("adapter config '" + file.string() + "': " + field + " " + why);
}

const nlohmann::json* field_of(const nlohmann::json& config, const char* name) {
  const auto it = config.find(name);
  return it == config.end() || it->is_null() ? nullptr : &*it;
}

std::vector<std::string> string_list(const nlohmann::json& value, const fs::path& file, const std::string& field) {
  if (!value.is_array()) refuse_field(file, field, "must be a list of module names");
  std::vector<std::string> out;
  for (const auto& item : value) {
    if (!item.is_string() || item.get<std::string>().empty()) {
      refuse_field(file, field, "must be a list of module names (it holds " + item.dump() + ")");
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

// The fields that select a LoRA variant or a layer subset fitsum does not compute: present with anything but their
// "off" value, the adapter would compute something else than the plain LoRA fitsum adds.
void refuse_unsupported(const nlohmann::json& config, const fs::path& file) {
  static const std::vector<std::pair<const char*, const char*>> features = {
      {"use_dora", "DoRA"},
      {"fan_in_fan_out", "fan_in_fan_out (Conv1D layers)"},
      {"rank_pattern", "per-layer ranks (rank_pattern)"},
      {"alpha_pattern", "per-layer alphas (alpha_pattern)"},
      {"layers_to_transform", "a layer subset (layers_to_transform)"},
      {"layer_replication", "layer replication"},
      {"exclude_modules", "exclude_modules"},
      {"lora_bias", "a bias on lora_B (lora_bias)"},
      {"use_qalora", "QA-LoRA (use_qalora)"},
      {"target_parameters", "target_parameters"},
      {"trainable_token_indices", "trainable_token_indices"},
      {"alora_invocation_tokens", "activated LoRA (alora_invocation_tokens)"},
      {"use_bdlora", "block-diagonal LoRA (use_bdlora)"},
      {"megatron_config", "Megatron layers (megatron_config)"},
  };
  for (const auto& [field, what] : features) {
    const auto* value = field_of(config, field);
    if (!value || *value == false || (value->is_structured() && value->empty())) continue;
    refuse_field(file, field,
                 "is " + value->dump() + ": " + what +
                     " is not supported by fitsum, which reads plain LoRA adapters; merge the adapter "
                     "with PEFT (merge_and_unload) and pass the merged model instead");
  }
}

void check_kind(const nlohmann::json& config, const fs::path& file) {
  const auto* type = field_of(config, "peft_type");
  if (!type || !type->is_string()) refuse_field(file, "peft_type", "is missing; this is no PEFT adapter config");
  if (*type != "LORA") {
    refuse_field(file, "peft_type", "is " + type->dump() + "; fitsum reads LoRA adapters (peft_type \"LORA\") only");
  }
  const auto* task = field_of(config, "task_type");
  if (task && *task != "SEQ_2_SEQ_LM") {
    refuse_field(file, "task_type",
                 "is " + task->dump() + "; fitsum's models are sequence-to-sequence (task_type \"SEQ_2_SEQ_LM\")");
  }
}

std::unique_ptr<TensorSource> open_weights(const AdapterFolder& folder) {
  ModelFolder weights;
  weights.dir = folder.dir;
  weights.format = folder.format;
  weights.weight_files = {folder.weights_file};
  return open_tensor_source(weights);
}

[[noreturn]] void throw_problems(const AdapterFolder& folder, const std::vector<std::string>& problems) {
  std::ostringstream message;
  message << "adapter '" << folder.weights_file.string() << "' does not match its " << kAdapterConfigName
          << " (r=" << folder.config.r << ") on this base model: " << problems.size()
          << (problems.size() == 1 ? " problem: " : " problems: ");
  const std::size_t shown = std::min<std::size_t>(problems.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) message << (i ? "; " : "") << problems[i];
  if (problems.size() > shown) message << "; and " << problems.size() - shown << " more";
  message << "; check that the adapter was trained on this base model";
  throw std::runtime_error(message.str());
}

// Before apply_lora allocates anything: every stored A has r rows (so the adapters built are the file's size).
void check_ranks(const AdapterFolder& folder, const TensorSource& source) {
  std::vector<std::string> problems;
  bool any = false;
  for (const auto& info : source.tensors()) {
    if (!ends_with(info.name, ".lora_A.weight")) continue;
    any = true;
    if (info.shape.size() != 2 || info.shape[0] != folder.config.r) {
      problems.push_back("'" + info.name + "' has shape " + shape_text(info.shape) +
                         ", expected r = " + std::to_string(folder.config.r) + " rows");
    }
  }
  if (!any) problems.push_back("it holds no lora_A tensor");
  if (!problems.empty()) throw_problems(folder, problems);
}

}  // namespace

std::string peft_key(model::Seq2SeqLMImpl& model, const std::string& parameter_name) {
  return key_of(adapted_layers(model), parameter_name);
}

nlohmann::json adapter_config_json(model::Seq2SeqLMImpl& model, const model::LoraConfig& config,
                                   const AdapterBase& base) {
  nlohmann::json j = nlohmann::json::object();
  for (const char* null_field : {"alora_invocation_tokens", "arrow_config", "auto_mapping", "corda_config",
                                 "eva_config", "exclude_modules", "kasa_config", "layer_replication", "layers_pattern",
                                 "layers_to_transform", "lora_ga_config", "megatron_config", "monteclora_config",
                                 "target_parameters", "trainable_token_indices", "use_bdlora", "velora_config"}) {
    j[null_field] = nullptr;
  }
  j["alpha_pattern"] = nlohmann::json::object();
  j["rank_pattern"] = nlohmann::json::object();
  j["loftq_config"] = nlohmann::json::object();
  j["base_model_name_or_path"] =
      base.base_model_name_or_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(base.base_model_name_or_path);
  j["revision"] = base.revision.empty() ? nlohmann::json(nullptr) : nlohmann::json(base.revision);
  j["bias"] = model::lora_bias_name(config.bias);
  j["ensure_weight_tying"] = false;
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;  // save_pretrained writes the config in inference mode
  j["init_lora_weights"] = true;
  j["lora_alpha"] = number_json(config.lora_alpha);
  j["lora_bias"] = false;
  j["lora_dropout"] = config.lora_dropout;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] =
      config.modules_to_save.empty() ? nlohmann::json(nullptr) : nlohmann::json(config.modules_to_save);
  j["peft_type"] = "LORA";
  j["peft_version"] = kPeftVersion;
  j["qalora_group_size"] = 16;
  j["r"] = config.r;
  j["target_modules"] = target_modules_json(model, config);
  j["task_type"] = "SEQ_2_SEQ_LM";
  j["use_dora"] = false;
  j["use_qalora"] = false;
  j["use_rslora"] = config.use_rslora;
  return j;
}

std::string adapter_config_text(const nlohmann::json& config) {
  // nlohmann::json keeps object keys sorted; ensure_ascii escapes as Python's json.dumps does by default.
  return config.dump(2, ' ', /*ensure_ascii=*/true);
}

void save_adapter(model::Seq2SeqLMImpl& model, const model::LoraConfig& config, const fs::path& dir,
                  const AdapterBase& base) {
  fs::create_directories(dir);
  const auto tensors = peft_state(model, config);
  if (tensors.empty()) throw std::invalid_argument("save_adapter: the model has no LoRA adapters");
  write_safetensors(dir / kAdapterWeightsName, tensors);
  util::write_file_atomic(dir / kAdapterConfigName, adapter_config_text(adapter_config_json(model, config, base)));
}

bool is_adapter_folder(const fs::path& dir) { return util::folder_has_file(dir, kAdapterConfigName); }

model::LoraConfig parse_adapter_config(const nlohmann::json& config, const fs::path& file) {
  if (!config.is_object()) throw std::runtime_error("adapter config '" + file.string() + "' is not a JSON object");
  check_kind(config, file);
  refuse_unsupported(config, file);
  model::LoraConfig c;
  const auto* r = field_of(config, "r");
  if (!r || !r->is_number_integer() || r->get<std::int64_t>() < 1 || r->get<std::int64_t>() > kMaxRank) {
    refuse_field(file, "r",
                 "must be a whole number from 1 to " + std::to_string(kMaxRank) + (r ? ", got " + r->dump() : ""));
  }
  c.r = r->get<std::int64_t>();
  if (const auto* alpha = field_of(config, "lora_alpha")) {
    if (!alpha->is_number() || !std::isfinite(alpha->get<double>()))
      refuse_field(file, "lora_alpha", "must be a number");
    c.lora_alpha = alpha->get<double>();
  }
  if (const auto* dropout = field_of(config, "lora_dropout")) {
    if (!dropout->is_number()) refuse_field(file, "lora_dropout", "must be a number");
    c.lora_dropout = dropout->get<double>();
  }
  if (const auto* targets = field_of(config, "target_modules")) {
    if (targets->is_string()) {
      if (*targets != "all-linear") {
        refuse_field(file, "target_modules",
                     "is the regular expression " + targets->dump() +
                         ", which fitsum does not match; list the module names instead");
      }
      c.target_modules = {"all-linear"};
    } else {
      c.target_modules = string_list(*targets, file, "target_modules");
    }
  }
  if (const auto* bias = field_of(config, "bias")) {
    if (!bias->is_string()) refuse_field(file, "bias", "must be \"none\", \"all\" or \"lora_only\"");
    try {
      c.bias = model::parse_lora_bias(bias->get<std::string>());
    } catch (const std::invalid_argument& e) {
      refuse_field(file, "bias", std::string("is not valid: ") + e.what());
    }
  }
  if (const auto* saved = field_of(config, "modules_to_save"))
    c.modules_to_save = string_list(*saved, file, "modules_to_save");
  if (const auto* rslora = field_of(config, "use_rslora")) {
    if (!rslora->is_boolean()) refuse_field(file, "use_rslora", "must be true or false");
    c.use_rslora = rslora->get<bool>();
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("adapter config '" + file.string() + "': " + e.what());
  }
  return c;
}

AdapterFolder open_adapter_folder(const fs::path& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    throw std::runtime_error("adapter '" + dir.string() + "' " +
                             (fs::exists(dir, error) ? "is not a folder" : "does not exist") +
                             "; pass the folder PEFT's save_pretrained (or a fitsum LoRA run) wrote");
  }
  AdapterFolder folder;
  folder.dir = dir;
  folder.config_file = dir / kAdapterConfigName;
  if (!is_adapter_folder(dir)) {
    const bool model = util::folder_has_file(dir, "config.json");
    throw std::runtime_error("no " + std::string(kAdapterConfigName) + " in '" + dir.string() + "'; " +
                             (model ? "it is a full model folder: pass it as --model_name_or_path"
                                    : "pass the folder PEFT's save_pretrained (or a fitsum LoRA run) wrote"));
  }
  const auto json = util::read_json_file(folder.config_file);
  folder.config = parse_adapter_config(json, folder.config_file);
  if (const auto* base = field_of(json, "base_model_name_or_path"); base && base->is_string()) {
    folder.base.base_model_name_or_path = base->get<std::string>();
  }
  if (const auto* revision = field_of(json, "revision"); revision && revision->is_string()) {
    folder.base.revision = revision->get<std::string>();
  }
  if (util::folder_has_file(dir, kAdapterWeightsName)) {
    folder.format = WeightFormat::safetensors;
    folder.weights_file = dir / kAdapterWeightsName;
  } else if (util::folder_has_file(dir, kAdapterBinName)) {
    folder.format = WeightFormat::pytorch_bin;
    folder.weights_file = dir / kAdapterBinName;
  } else {
    throw std::runtime_error("adapter '" + dir.string() + "' has " + kAdapterConfigName + " but neither " +
                             kAdapterWeightsName + " nor " + kAdapterBinName + "; copy the adapter's weights file too");
  }
  return folder;
}

void load_adapter(model::Seq2SeqLMImpl& model, const AdapterFolder& folder) {
  const auto source = open_weights(folder);
  check_ranks(folder, *source);
  try {
    model::apply_lora(model, folder.config, 0);  // the initial values are all replaced below
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("adapter config '" + folder.config_file.string() +
                             "' does not fit this base model: " + e.what());
  }
  load_adapter_weights(model, folder);
}

void load_adapter_weights(model::Seq2SeqLMImpl& model, const AdapterFolder& folder) {
  const auto source = open_weights(folder);
  std::map<std::string, at::Tensor> expected;
  for (auto& [key, tensor] : peft_state(model, folder.config)) expected.emplace(key, tensor);
  // PEFT loads every stored tensor whose name the model has (strict=False): a base model's buffer saved beside the
  // biases (older transformers kept BART's final_logits_bias in the state dict) is such a tensor.
  std::map<std::string, at::Tensor> base;
  for (const auto& item : model.named_parameters()) base.emplace(kPrefix + item.key(), item.value());
  for (const auto& item : model.named_buffers()) base.emplace(kPrefix + item.key(), item.value());
  std::vector<std::string> problems;
  std::vector<std::pair<const TensorSource::Info*, at::Tensor>> copies;
  std::set<std::string> found;
  for (const auto& info : source->tensors()) {
    auto it = expected.find(info.name);
    const bool known = it != expected.end();
    if (!known) it = base.find(info.name);
    if (it == base.end()) {
      problems.push_back("unexpected tensor '" + info.name + "' (shape " + shape_text(info.shape) +
                         "): the adapters of this config on this base model have no such tensor");
      continue;
    }
    if (known) found.insert(info.name);
    const auto want = it->second.sizes().vec();
    if (info.shape != want) {
      problems.push_back("'" + info.name + "' has shape " + shape_text(info.shape) + ", expected " + shape_text(want));
    } else if (info.dtype != "F32" && info.dtype != "F16" && info.dtype != "BF16" && info.dtype != "F64") {
      problems.push_back("tensor '" + info.name + "' has dtype " + info.dtype +
                         "; adapters must be F32, F16, BF16 or F64");
    } else {
      copies.emplace_back(&info, it->second);
    }
  }
  for (const auto& [key, tensor] : expected) {
    if (!found.count(key))
      problems.push_back("missing tensor '" + key + "' (shape " + shape_text(tensor.sizes().vec()) + ")");
  }
  if (!problems.empty()) throw_problems(folder, problems);
  torch::NoGradGuard no_grad;
  for (auto& [info, target] : copies) target.copy_(source->read(info->name, target.scalar_type()));
}

}  // namespace fitsum::io
