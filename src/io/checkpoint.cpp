// Implements include/fitsum/io/checkpoint.h.
#include "fitsum/io/checkpoint.h"
#include "fitsum/util/strings.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <torch/torch.h>

#include "fitsum/io/hf_config.h"
#include "fitsum/io/pytorch_bin.h"
#include "fitsum/io/safetensors.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/util/files.h"

namespace fitsum::io {

namespace {

// More shards than any published checkpoint has (pegasus-large has none, the largest models a few hundred).
constexpr std::size_t kMaxShards = 10000;

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

using util::ends_with;

// ---- safetensors or pytorch_model.bin, single or sharded ----

TensorSource::Info info_of(const SafetensorsEntry& e, const fs::path& file) {
  return {e.name, e.shape, e.dtype, file.string()};
}
TensorSource::Info info_of(const PickledTensor& t, const fs::path& file) {
  return {t.name, t.sizes, safetensors_dtype(t.dtype), file.string()};
}
const std::vector<SafetensorsEntry>& entries_of(const SafetensorsReader& reader) { return reader.entries(); }
const std::vector<PickledTensor>& entries_of(const PytorchBinReader& reader) { return reader.tensors(); }

// One reader per file; a tensor name may appear in one file only.
template <typename Reader>
class ShardedSource : public TensorSource {
 public:
  explicit ShardedSource(const std::vector<fs::path>& files) {
    for (const auto& file : files) {
      readers_.push_back(std::make_unique<Reader>(file));
      for (const auto& e : entries_of(*readers_.back())) {
        const auto [it, inserted] = owner_.emplace(e.name, std::make_pair(readers_.size() - 1, infos_.size()));
        if (!inserted) {
          throw std::runtime_error("tensor '" + e.name + "' is stored twice: in '" + infos_[it->second.second].file +
                                   "' and '" + file.string() + "'; the shards overlap (download them again)");
        }
        infos_.push_back(info_of(e, file));
      }
    }
  }
  const std::vector<Info>& tensors() const override { return infos_; }
  at::Tensor read(const std::string& name, at::ScalarType dtype) const override {
    return readers_[owner_.at(name).first]->read(name, dtype);
  }

 private:
  std::vector<std::unique_ptr<Reader>> readers_;
  std::map<std::string, std::pair<std::size_t, std::size_t>> owner_;  // name -> (reader, info)
  std::vector<Info> infos_;
};

// A shard name from an index must stay inside the model folder: relative, no "." or ".." component, no empty
// component, no control characters. What it resolves to (a link into HF's blob store is fine) must be a file.
fs::path confined_shard(const fs::path& index_file, const std::string& name) {
  const auto refuse = [&](const std::string& why) {
    std::string shown;  // control characters as \xNN: a NUL would end the message (what() is a C string)
    for (const char c : name.substr(0, 200)) {
      const auto byte = static_cast<unsigned char>(c);
      if (byte >= 0x20 && byte != 0x7f) {
        shown += c;
      } else {
        static const char* hex = "0123456789abcdef";
        shown += std::string("\\x") + hex[byte >> 4] + hex[byte & 15];
      }
    }
    throw std::runtime_error("shard name '" + shown + "' in '" + index_file.string() + "': " + why +
                             "; an index may only name files inside its own folder (download it again)");
  };
  if (name.empty() || name.size() > 4096) refuse("it is empty or longer than 4096 bytes");
  for (const char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\')
      refuse("it contains a control character or '\\'");
  }
  if (name.front() == '/') refuse("it is an absolute path");
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    const std::string part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") refuse("it has an empty, '.' or '..' component");
    start = end + 1;
  }
  const fs::path file = index_file.parent_path() / name;
  const std::string problem = util::file_kind_problem(file);
  if (!problem.empty()) {
    throw std::runtime_error("'" + index_file.string() + "' names shard '" + name + "': " + problem +
                             "; download the missing shards (or the whole folder) again");
  }
  return file;
}

std::vector<fs::path> shards_from_index(const fs::path& index_file) {
  const auto index = util::read_json_file(index_file);
  const auto map = index.is_object() ? index.find("weight_map") : index.end();
  if (map == index.end() || !map->is_object()) {
    throw std::runtime_error("'" + index_file.string() + "' has no \"weight_map\" object; download it again");
  }
  std::set<std::string> names;
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it.value().is_string()) {
      throw std::runtime_error("'" + index_file.string() + "': the shard of '" + it.key() + "' is not a file name");
    }
    names.insert(it.value().get<std::string>());
    if (names.size() > kMaxShards) {
      throw std::runtime_error("'" + index_file.string() + "' names more than " + std::to_string(kMaxShards) +
                               " shards; download it again");
    }
  }
  std::vector<fs::path> files;
  for (const auto& name : names) files.push_back(confined_shard(index_file, name));
  return files;
}

// Whether `path` names something (even a broken link); a name that exists must resolve to a regular file.
bool names_a_file(const fs::path& path, std::string_view what) {
  std::error_code error;
  if (!fs::exists(fs::symlink_status(path, error))) return false;
  util::require_regular_file(path, what);
  return true;
}

}  // namespace

std::string ModelFolder::describe_weights() const {
  switch (format) {
    case WeightFormat::none:
      return "no weights (config only)";
    case WeightFormat::safetensors:
      return weight_files.size() == 1 ? weight_files[0].filename().string()
                                      : std::to_string(weight_files.size()) + " safetensors shards";
    case WeightFormat::pytorch_bin:
      return weight_files.size() == 1 ? weight_files[0].filename().string()
                                      : std::to_string(weight_files.size()) + " pytorch_model.bin shards";
  }
  return "";
}

ModelFolder open_model_folder(const fs::path& dir) {
  std::error_code error;
  if (!fs::exists(dir, error)) {
    const bool loop = error == std::errc::too_many_symbolic_link_levels;
    throw std::runtime_error("model folder '" + dir.string() +
                             (loop ? "' is a symbolic link loop" : "' does not exist") +
                             "; pass a Hugging Face model folder");
  }
  ModelFolder folder;
  folder.dir = dir;
  if (!fs::is_directory(dir, error)) {
    throw std::runtime_error("'" + dir.string() + "' is not a folder; pass a Hugging Face model folder");
  }
  const auto config_file = dir / "config.json";
  if (!names_a_file(config_file, "config.json")) {
    if (util::folder_has_file(dir, "adapter_config.json")) {  // a LoRA adapter (io/adapter.h) holds no model
      throw std::runtime_error("'" + dir.string() + "' holds a LoRA adapter (adapter_config.json), not a model; pass " +
                               "its base model as the model and this folder as --adapter_name_or_path");
    }
    throw std::runtime_error("no config.json in '" + dir.string() +
                             "'; pass a Hugging Face model folder (config.json plus weights)");
  }
  folder.config_json = util::read_json_file(config_file);
  folder.config = model_config_from_hf(folder.config_json, config_file.string());

  if (names_a_file(dir / "model.safetensors", "the weights file")) {
    folder.format = WeightFormat::safetensors;
    folder.weight_files = {dir / "model.safetensors"};
  } else if (names_a_file(dir / "model.safetensors.index.json", "the shard index")) {
    folder.format = WeightFormat::safetensors;
    folder.index_file = dir / "model.safetensors.index.json";
    folder.weight_files = shards_from_index(folder.index_file);
  } else if (names_a_file(dir / "pytorch_model.bin", "the weights file")) {
    folder.format = WeightFormat::pytorch_bin;
    folder.weight_files = {dir / "pytorch_model.bin"};
  } else if (names_a_file(dir / "pytorch_model.bin.index.json", "the shard index")) {
    folder.format = WeightFormat::pytorch_bin;
    folder.index_file = dir / "pytorch_model.bin.index.json";
    folder.weight_files = shards_from_index(folder.index_file);
  }
  return folder;
}

std::unique_ptr<TensorSource> open_tensor_source(const ModelFolder& folder) {
  switch (folder.format) {
    case WeightFormat::safetensors:
      return std::make_unique<ShardedSource<SafetensorsReader>>(folder.weight_files);
    case WeightFormat::pytorch_bin:
      return std::make_unique<ShardedSource<PytorchBinReader>>(folder.weight_files);
    case WeightFormat::none:
      break;
  }
  throw std::runtime_error("model folder '" + folder.dir.string() +
                           "' holds no weights (model.safetensors, pytorch_model.bin or a sharded index)");
}

namespace {

// How the stored tensors map onto the model: what to copy, which stored tensors are tied copies of
// model.shared.weight, what is computed instead of read, and every mismatch.
struct WeightMatch {
  std::map<std::string, at::Tensor> expected;  // parameters and buffers under their HF names
  bool has_prefix = false;                     // stored names start with "model." (else: a bare PegasusModel)
  bool top_level = false;                      // the blocks layout's names have no "model." level at all
  std::string shared_name = "model.shared.weight";
  std::vector<const TensorSource::Info*> to_load;
  std::vector<const TensorSource::Info*> duplicates;
  std::set<std::string> found;
  std::vector<std::string> computed;
  std::vector<std::string> problems;

  // Checkpoints saved from the bare PegasusModel have no "model." prefix; HF adds it on load, so do we.
  std::string hf_name(const std::string& stored) const {
    if (top_level || has_prefix || stored == "final_logits_bias" || stored.rfind("lm_head.", 0) == 0) return stored;
    return "model." + stored;
  }
};

// Sorts one stored tensor into to_load, duplicates or problems.
void match_stored(WeightMatch& m, const TensorSource::Info& info, const model::ModelConfig& c) {
  const std::string prefix = m.top_level ? "" : "model.";
  std::set<std::string> tied_copies{prefix + "encoder.embed_tokens.weight", prefix + "decoder.embed_tokens.weight"};
  if (c.tie_word_embeddings) tied_copies.insert("lm_head.weight");
  const std::string name = m.hf_name(info.name);
  auto it = m.expected.find(name);
  std::vector<std::int64_t> want;
  if (it != m.expected.end()) {
    want = it->second.sizes().vec();
  } else if (tied_copies.count(name)) {
    want = {c.vocab_size, c.d_model};
  } else {
    m.problems.push_back("unexpected tensor '" + info.name + "' (shape " + shape_text(info.shape) +
                         "): the model built from config.json has no such parameter");
    return;
  }
  if (info.shape != want) {
    m.problems.push_back("'" + info.name + "' has shape " + shape_text(info.shape) + ", expected " + shape_text(want));
    return;
  }
  const bool floating = info.dtype == "F32" || info.dtype == "F16" || info.dtype == "BF16" || info.dtype == "F64";
  if (!floating) {
    m.problems.push_back("tensor '" + info.name + "' has dtype " + info.dtype +
                         "; weights must be F32, F16, BF16 or F64");
    return;
  }
  if (it == m.expected.end()) {
    m.duplicates.push_back(&info);
  } else {
    m.found.insert(name);
    m.to_load.push_back(&info);
  }
}

WeightMatch match_weights(model::Seq2SeqLMImpl& model, const TensorSource& source) {
  WeightMatch m;
  for (const auto& item : model.named_parameters()) m.expected[item.key()] = item.value();
  for (const auto& item : model.named_buffers()) m.expected[item.key()] = item.value();
  for (const auto& info : source.tensors()) {
    if (info.name.rfind("model.", 0) == 0) m.has_prefix = true;
  }
  const auto& c = model.config();
  m.top_level = c.module_layout == model::ModuleLayout::blocks;
  if (m.top_level) m.shared_name = "shared.weight";
  for (const auto& info : source.tensors()) match_stored(m, info, c);
  for (const auto& [name, tensor] : m.expected) {
    if (m.found.count(name)) continue;
    const bool computable =
        name == "final_logits_bias" ||
        (ends_with(name, "embed_positions.weight") && c.position_embedding == model::PositionEmbedding::sinusoidal);
    if (name == m.shared_name && !m.duplicates.empty()) {
      continue;  // only a tied copy is stored: it is loaded into model.shared below
    }
    if (computable) {
      m.computed.push_back(name);
    } else {
      m.problems.push_back("missing tensor '" + name + "' (shape " + shape_text(tensor.sizes().vec()) + ")");
    }
  }
  return m;
}

[[noreturn]] void throw_mismatch(const ModelFolder& folder, const model::ModelConfig& c,
                                 const std::vector<std::string>& problems) {
  std::ostringstream message;
  message << "the weights in '" << folder.dir.string() << "' (" << folder.describe_weights()
          << ") do not match its config.json (vocab_size=" << c.vocab_size << ", d_model=" << c.d_model
          << ", encoder_layers=" << c.encoder_layers << ", decoder_layers=" << c.decoder_layers
          << ", max_position_embeddings=" << c.max_position_embeddings << "): " << problems.size()
          << (problems.size() == 1 ? " problem: " : " problems: ");
  const std::size_t shown = std::min<std::size_t>(problems.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) message << (i ? "; " : "") << problems[i];
  if (problems.size() > shown) message << "; and " << problems.size() - shown << " more";
  message << "; check that config.json belongs to these weights";
  throw std::runtime_error(message.str());
}

}  // namespace

LoadReport load_weights(model::Seq2SeqLMImpl& model, const ModelFolder& folder) {
  const auto source = open_tensor_source(folder);
  auto m = match_weights(model, *source);
  if (!m.problems.empty()) throw_mismatch(folder, model.config(), m.problems);
  LoadReport report;
  report.computed = m.computed;
  torch::NoGradGuard no_grad;
  for (const auto* info : m.to_load) {
    auto& target = m.expected.at(m.hf_name(info->name));
    auto value = source->read(info->name, target.scalar_type());
    target.copy_(value);
    report.tensors_loaded += 1;
    report.bytes_read += static_cast<std::uint64_t>(value.numel()) * value.element_size();
  }
  auto& shared = model.model->shared->weight;
  for (const auto* info : m.duplicates) {
    const std::string name = m.hf_name(info->name);
    report.tied_duplicates.push_back(name);
    auto value = source->read(info->name, shared.scalar_type());
    if (!m.found.count(m.shared_name)) {
      shared.copy_(value);
      m.found.insert(m.shared_name);
      report.tensors_loaded += 1;
    } else if (!torch::equal(value, shared)) {
      report.warnings.push_back("'" + name + "' differs from " + m.shared_name + "; tie_word_embeddings is true, so " +
                                m.shared_name + " is used (as Hugging Face does after tie_weights)");
    }
  }
  return report;
}

std::vector<std::pair<std::string, at::Tensor>> checkpoint_tensors(model::Seq2SeqLMImpl& model) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& item : model.named_parameters()) tensors.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers()) tensors.emplace_back(item.key(), item.value());
  return tensors;
}

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names = {"spiece.model",     "tokenizer.json",        "vocab.json",
                                                 "merges.txt",       "tokenizer_config.json", "special_tokens_map.json",
                                                 "added_tokens.json"};
  return names;
}

void save_model_folder(model::Seq2SeqLMImpl& model, const fs::path& out_dir, const SaveOptions& options) {
  fs::create_directories(out_dir);
  write_safetensors(out_dir / "model.safetensors", checkpoint_tensors(model));

  auto config_json = model_config_to_hf(model.config(), options.config_json);
  config_json["torch_dtype"] = "float32";
  util::write_json_file_atomic(out_dir / "config.json", config_json);
  const auto generation = options.generation_config.is_object() && !options.generation_config.empty()
                              ? options.generation_config
                              : generation_config_from_hf(config_json);
  util::write_json_file_atomic(out_dir / "generation_config.json", generation);

  copy_tokenizer_files(options.copy_tokenizer_from, out_dir);
}

void copy_tokenizer_files(const fs::path& from_dir, const fs::path& out_dir) {
  if (from_dir.empty()) return;
  for (const auto& name : tokenizer_file_names()) {
    const auto from = from_dir / name;
    if (fs::exists(from) && fs::absolute(from) != fs::absolute(out_dir / name)) {
      util::write_file_atomic(out_dir / name, util::read_file(from));
    }
  }
}

}  // namespace fitsum::io
