// Implements the registry of include/fitsum/families/family.h: lookups by model_type, the families' shared
// helpers, and the choice of a tokenizer folder's family.
#include <stdexcept>

#include "fitsum/families/config_fields.h"
#include "fitsum/families/family.h"
#include "fitsum/util/files.h"

namespace fitsum::families {

namespace {

// A string field of a JSON file's top-level object, "" when absent; throws naming the file when it is not a string.
std::string string_field(const fs::path& file, const char* key) {
  const auto json = util::read_json_file(file);
  if (!json.is_object()) throw std::runtime_error("'" + file.string() + "' is not a JSON object");
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return "";
  if (!it->is_string()) throw std::runtime_error("'" + file.string() + "': " + key + " is not a string");
  return it->get<std::string>();
}

// The family a tokenizer folder says it is: tokenizer_config.json's tokenizer_class, else config.json's model_type.
const Family* declared_family(const fs::path& dir) {
  if (util::folder_has_file(dir, "tokenizer_config.json")) {
    const std::string name = string_field(dir / "tokenizer_config.json", "tokenizer_class");
    for (const Family* family : registered_families()) {
      for (const auto& prefix : family->tokenizer_class_prefixes) {
        if (name.rfind(prefix, 0) == 0) return family;
      }
    }
  }
  if (util::folder_has_file(dir, "config.json")) {
    return find_family(string_field(dir / "config.json", "model_type"));
  }
  return nullptr;
}

// A folder that names no family: the first family in the registry claiming one of its files.
const Family* family_of_files(const fs::path& dir) {
  for (const Family* family : registered_families()) {
    for (const auto& file : family->tokenizer_files) {
      if (util::folder_has_file(dir, file)) return family;
    }
  }
  return nullptr;
}

}  // namespace

std::int64_t token_field(const nlohmann::json& j, const char* name, std::int64_t fallback, const std::string& source) {
  const auto it = j.find(name);
  if (it != j.end() && it->is_array()) {
    if (it->empty() || !(*it)[0].is_number_integer()) {
      throw std::invalid_argument(source + ": config field '" + name + "' must be an integer or a list of integers");
    }
    return (*it)[0].get<std::int64_t>();
  }
  return field<std::int64_t>(j, name, fallback, source);
}

const std::vector<const Family*>& registered_families() {
  static const std::vector<const Family*> families = {&pegasus_family(), &bart_family(), &t5_family(),
                                                            &pegasus_x_family(), &long_t5_family()};
  return families;
}

const ModelType* find_model_type(const std::string& model_type) {
  for (const Family* family : registered_families()) {
    for (const auto& type : family->model_types) {
      if (type.name == model_type) return &type;
    }
  }
  return nullptr;
}

const NamedShape* find_shape(const std::string& name) {
  for (const Family* family : registered_families()) {
    for (const auto& shape : family->shapes) {
      if (shape.name == name) return &shape;
    }
  }
  return nullptr;
}

std::string shape_names() {
  std::string names;
  for (const Family* family : registered_families()) {
    for (const auto& shape : family->shapes) names += (names.empty() ? "" : ", ") + shape.name;
  }
  return names;
}

const Family* find_family(const std::string& model_type) {
  for (const Family* family : registered_families()) {
    for (const auto& type : family->model_types) {
      if (type.name == model_type) return family;
    }
  }
  return nullptr;
}

std::string supported_model_types() {
  std::vector<std::string> names;
  for (const Family* family : registered_families()) {
    for (const auto& type : family->model_types) names.push_back("'" + type.name + "'");
  }
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  }
  return text;
}

const Family& family_for(const std::string& model_type, const std::string& source) {
  const Family* family = find_family(model_type);
  if (family == nullptr) {
    throw std::invalid_argument(source + ": config field 'model_type' is '" + model_type + "'; fitsum supports " +
                                supported_model_types());
  }
  return *family;
}

std::string source_prefix_family(const std::string& model_type) {
  const ModelType* type = find_model_type(model_type);
  return type != nullptr && type->expects_source_prefix ? find_family(model_type)->name : "";
}

std::vector<tokenizer::TokenId> empty_text_ids(const model::ModelConfig& config) {
  const auto eos = static_cast<tokenizer::TokenId>(config.eos_token_id);
  const Family* family = find_family(config.model_type);
  if (family != nullptr && family->text_starts_with_bos) {
    return {static_cast<tokenizer::TokenId>(config.bos_token_id), eos};
  }
  return {eos};
}

std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const fs::path& dir) {
  const Family* family = declared_family(dir);
  if (family == nullptr) family = family_of_files(dir);
  if (family != nullptr) return family->load_tokenizer(dir);
  throw std::runtime_error("no tokenizer in '" + dir.string() +
                           "': expected spiece.model (PEGASUS, T5), tokenizer.json or vocab.json + merges.txt "
                           "(BART); pass --tokenizer_name with a folder that has one");
}

}  // namespace fitsum::families
