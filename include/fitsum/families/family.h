// The model families fitsum reads (PEGASUS, BART, T5, PEGASUS-X, LongT5), one `Family` record each, in a registry keyed by config.json's
// `model_type`. A record holds everything that differs per family outside the model's own structure: config.json's
// field names and defaults (and writing them back), transformers' class names, the attributes of its config class
// (for --config_overrides), which tokenizer it uses and how a tokenizer folder says it is the family's, its text
// template's special ids and whether it expects a task prefix. The model reads only the feature fields the reader
// sets (model/config.h: position_embedding, module_layout, normalization, ...), never a family.
//
// A new family is one more record (docs/adding-a-family.md); family names appear in no file outside this folder
// (Architecture.FamilyNamesLiveInTheirModules).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fitsum/model/config.h"
#include "fitsum/tokenizer/tokenizer.h"

namespace fitsum::families {

namespace fs = std::filesystem;

// One `model_type` a family reads (T5 reads "t5" and "mt5": the same model with other defaults).
struct ModelType {
  std::string name;          // config.json's model_type
  std::string architecture;  // the transformers class written to "architectures" (...ForConditionalGeneration)
  std::string config_class;  // transformers' config class (...Config)
  // The attributes the config class's __init__ sets, with its defaults (transformers 4.47), as a JSON object.
  const char* config_attributes = "{}";
  // Pretrained with a task prefix before every text (T5: "summarize: "): without --source_prefix, fitsum warns
  // as run_summarization.py does.
  bool expects_source_prefix = false;
};

// A released checkpoint's architecture by name, for runs without its files (`fitsum bench train --shape
// pegasus-x-base`): the checkpoint's config.json fields that set the model's structure (configs/<name>/config.json
// holds the same values).
struct NamedShape {
  std::string name;
  const char* config_json = "{}";
};

struct Family {
  std::string name;                     // in messages: "PEGASUS", "BART", "T5"
  std::vector<ModelType> model_types;  // the first is the family's own

  // config.json -> ModelConfig with the family's field names and transformers' defaults; `model_type` is one of
  // model_types, `source` names the file in errors (std::invalid_argument). The result is not yet validated.
  model::ModelConfig (*read_config)(const nlohmann::json& config_json, const std::string& model_type,
                                    const std::string& source) = nullptr;
  // The family's config.json fields for `config`, written over `j` (which keeps every field fitsum does not know).
  void (*write_config)(const model::ModelConfig& config, nlohmann::json& j) = nullptr;
  // The attributes the config class's __init__ derives from others, given every attribute it holds (T5's
  // num_decoder_layers from num_layers): an override of the source leaves them as they were.
  nlohmann::json (*derived_attributes)(const nlohmann::json& attributes) = nullptr;
  // The config class's attribute_map: names PretrainedConfig reads and writes as another attribute.
  std::vector<std::pair<std::string, std::string>> attribute_map;

  // tokenizer_config.json's tokenizer_class starting with one of these names the family's tokenizer.
  std::vector<std::string> tokenizer_class_prefixes;
  // A folder that names no family (no tokenizer_class, no model_type) is this family's when it holds one of these;
  // the registry's order decides between families.
  std::vector<std::string> tokenizer_files;
  std::unique_ptr<tokenizer::Tokenizer> (*load_tokenizer)(const fs::path& dir) = nullptr;
  // The text template starts with bos (BART: <s> text </s>; PEGASUS and T5: text </s>).
  bool text_starts_with_bos = false;
  // The family's released architectures by name (benchmark shapes).
  std::vector<NamedShape> shapes;
};

// The registered families, in the order the registry consults them.
const std::vector<const Family*>& registered_families();
// The family reading `model_type`, or nullptr.
const Family* find_family(const std::string& model_type);
// The family reading `model_type`; throws std::invalid_argument naming `source`, the model_type and the supported
// ones ("<source>: config field 'model_type' is 'x'; fitsum supports 'pegasus', ...").
const Family& family_for(const std::string& model_type, const std::string& source);
// `model_type`'s entry in its family, or nullptr when no family reads it.
const ModelType* find_model_type(const std::string& model_type);
// The named shape of any family, or nullptr.
const NamedShape* find_shape(const std::string& name);
// Every family's shape names, for messages: "pegasus-x-base, pegasus-x-large, ...".
std::string shape_names();
// Every registered model_type in quotes, for messages: "'pegasus', 'bart', 't5' and 'mt5'".
std::string supported_model_types();

// The family's name ("T5") when models of `model_type` expect a task prefix before every text, else "".
std::string source_prefix_family(const std::string& model_type);
// What an empty text encodes to in the family's template, from the config's special ids (BART: <s> </s>; PEGASUS
// and T5: </s>): for pre-tokenized data without a tokenizer.
std::vector<tokenizer::TokenId> empty_text_ids(const model::ModelConfig& config);

// Opens the tokenizer of a Hugging Face model (or tokenizer) folder: the family from tokenizer_config.json's
// tokenizer_class, else from config.json's model_type, else from the files present. Throws std::runtime_error
// naming the folder and the files looked for when it holds none.
std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const fs::path& dir);

// A Family::load_tokenizer for a tokenizer class with a `from_folder(dir)` factory.
template <typename TokenizerClass>
std::unique_ptr<tokenizer::Tokenizer> load_tokenizer_of(const fs::path& dir) {
  return std::make_unique<TokenizerClass>(TokenizerClass::from_folder(dir));
}

// The registry's entries (src/families/<family>.cpp).
const Family& pegasus_family();
const Family& bart_family();
const Family& t5_family();
const Family& pegasus_x_family();
const Family& long_t5_family();

}  // namespace fitsum::families
