// Implements include/fitsum/io/checkpoint.h.
#include "fitsum/io/checkpoint.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <torch/script.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include "fitsum/io/hf_config.h"
#include "fitsum/io/safetensors.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/util/files.h"

namespace fitsum::io {

namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---- safetensors, single or sharded ----

class SafetensorsSource : public TensorSource {
 public:
  explicit SafetensorsSource(const std::vector<fs::path>& files) {
    for (const auto& file : files) {
      readers_.push_back(std::make_unique<SafetensorsReader>(file));
      const auto& reader = *readers_.back();
      for (const auto& e : reader.entries()) {
        if (owner_.count(e.name)) {
          throw std::runtime_error("tensor '" + e.name + "' is stored twice: in '" +
                                   infos_[owner_[e.name].second].file + "' and '" + file.string() + "'");
        }
        owner_[e.name] = {readers_.size() - 1, infos_.size()};
        infos_.push_back({e.name, e.shape, e.dtype, file.string()});
      }
    }
  }
  const std::vector<Info>& tensors() const override { return infos_; }
  at::Tensor read(const std::string& name, at::ScalarType dtype) const override {
    return readers_[owner_.at(name).first]->read(name, dtype);
  }

 private:
  std::vector<std::unique_ptr<SafetensorsReader>> readers_;
  std::map<std::string, std::pair<std::size_t, std::size_t>> owner_;  // name -> (reader, info)
  std::vector<Info> infos_;
};

// ---- pytorch_model.bin (torch.save zip), single or sharded ----

class PickleSource : public TensorSource {
 public:
  explicit PickleSource(const std::vector<fs::path>& files) {
    for (const auto& file : files) {
      const std::string bytes = util::read_file(file);
      c10::IValue value;
      try {
        value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
      } catch (const std::exception& e) {
        throw std::runtime_error("cannot read '" + file.string() +
                                 "' as a torch.save checkpoint (it is corrupted, or not a state dict): " +
                                 std::string(e.what()).substr(0, 300));
      }
      if (!value.isGenericDict()) {
        throw std::runtime_error("'" + file.string() + "' does not hold a state dict (a name -> tensor mapping)");
      }
      for (const auto& item : value.toGenericDict()) {
        if (!item.key().isString() || !item.value().isTensor()) {
          throw std::runtime_error("'" + file.string() + "' holds an entry that is not a name -> tensor pair");
        }
        const std::string name = item.key().toStringRef();
        if (tensors_.count(name)) {
          throw std::runtime_error("tensor '" + name + "' is stored twice (second time in '" + file.string() + "')");
        }
        const auto tensor = item.value().toTensor();
        tensors_[name] = tensor;
        std::string dtype;
        try {
          dtype = safetensors_dtype(tensor.scalar_type());
        } catch (const std::exception&) {
          dtype = c10::toString(tensor.scalar_type());
        }
        infos_.push_back({name, tensor.sizes().vec(), dtype, file.string()});
      }
    }
  }
  const std::vector<Info>& tensors() const override { return infos_; }
  at::Tensor read(const std::string& name, at::ScalarType dtype) const override {
    return tensors_.at(name).to(dtype).contiguous();
  }

 private:
  std::map<std::string, at::Tensor> tensors_;
  std::vector<Info> infos_;
};

std::vector<fs::path> shards_from_index(const fs::path& index_file) {
  const auto index = util::read_json_file(index_file);
  const auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object()) {
    throw std::runtime_error("'" + index_file.string() + "' has no \"weight_map\" object");
  }
  std::set<std::string> names;
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it.value().is_string()) {
      throw std::runtime_error("'" + index_file.string() + "': the shard of '" + it.key() + "' is not a file name");
    }
    names.insert(it.value().get<std::string>());
  }
  std::vector<fs::path> files;
  for (const auto& name : names) {
    const auto file = index_file.parent_path() / name;
    if (!fs::exists(file)) {
      throw std::runtime_error("'" + index_file.string() + "' names shard '" + name + "', which is missing");
    }
    files.push_back(file);
  }
  return files;
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
  if (!fs::exists(dir)) {
    throw std::runtime_error("model folder '" + dir.string() + "' does not exist");
  }
  ModelFolder folder;
  folder.dir = dir;
  if (!fs::is_directory(dir)) {
    throw std::runtime_error("'" + dir.string() + "' is not a folder: pass a Hugging Face model folder");
  }
  const auto config_file = dir / "config.json";
  if (!fs::exists(config_file)) {
    throw std::runtime_error("no config.json in '" + dir.string() +
                             "': pass a Hugging Face model folder (config.json plus weights)");
  }
  folder.config_json = util::read_json_file(config_file);
  folder.config = model_config_from_hf(folder.config_json, config_file.string());

  if (fs::exists(dir / "model.safetensors")) {
    folder.format = WeightFormat::safetensors;
    folder.weight_files = {dir / "model.safetensors"};
  } else if (fs::exists(dir / "model.safetensors.index.json")) {
    folder.format = WeightFormat::safetensors;
    folder.index_file = dir / "model.safetensors.index.json";
    folder.weight_files = shards_from_index(folder.index_file);
  } else if (fs::exists(dir / "pytorch_model.bin")) {
    folder.format = WeightFormat::pytorch_bin;
    folder.weight_files = {dir / "pytorch_model.bin"};
  } else if (fs::exists(dir / "pytorch_model.bin.index.json")) {
    folder.format = WeightFormat::pytorch_bin;
    folder.index_file = dir / "pytorch_model.bin.index.json";
    folder.weight_files = shards_from_index(folder.index_file);
  }
  return folder;
}

std::unique_ptr<TensorSource> open_tensor_source(const ModelFolder& folder) {
  switch (folder.format) {
    case WeightFormat::safetensors:
      return std::make_unique<SafetensorsSource>(folder.weight_files);
    case WeightFormat::pytorch_bin:
      return std::make_unique<PickleSource>(folder.weight_files);
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
  std::vector<const TensorSource::Info*> to_load;
  std::vector<const TensorSource::Info*> duplicates;
  std::set<std::string> found;
  std::vector<std::string> computed;
  std::vector<std::string> problems;

  // Checkpoints saved from the bare PegasusModel have no "model." prefix; HF adds it on load, so do we.
  std::string hf_name(const std::string& stored) const {
    if (has_prefix || stored == "final_logits_bias" || stored.rfind("lm_head.", 0) == 0) return stored;
    return "model." + stored;
  }
};

// Sorts one stored tensor into to_load, duplicates or problems.
void match_stored(WeightMatch& m, const TensorSource::Info& info, const model::ModelConfig& c) {
  const std::set<std::string> tied_copies =
      c.tie_word_embeddings
          ? std::set<std::string>{"lm_head.weight", "model.encoder.embed_tokens.weight",
                                  "model.decoder.embed_tokens.weight"}
          : std::set<std::string>{"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"};
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
  for (const auto& info : source.tensors()) match_stored(m, info, c);
  for (const auto& [name, tensor] : m.expected) {
    if (m.found.count(name)) continue;
    const bool computable =
        name == "final_logits_bias" ||
        (ends_with(name, "embed_positions.weight") && c.position_embedding == model::PositionEmbedding::sinusoidal);
    if (name == "model.shared.weight" && !m.duplicates.empty()) {
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
  message << ". Check that config.json belongs to these weights.";
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
    if (!m.found.count("model.shared.weight")) {
      shared.copy_(value);
      m.found.insert("model.shared.weight");
      report.tensors_loaded += 1;
    } else if (!torch::equal(value, shared)) {
      report.warnings.push_back("'" + name +
                                "' differs from model.shared.weight; tie_word_embeddings is true, so "
                                "model.shared.weight is used (as Hugging Face does after tie_weights)");
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
  static const std::vector<std::string> names = {"spiece.model", "tokenizer.json", "tokenizer_config.json",
                                                 "special_tokens_map.json", "added_tokens.json"};
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

  if (!options.copy_tokenizer_from.empty()) {
    for (const auto& name : tokenizer_file_names()) {
      const auto from = options.copy_tokenizer_from / name;
      if (fs::exists(from) && fs::absolute(from) != fs::absolute(out_dir / name)) {
        util::write_file_atomic(out_dir / name, util::read_file(from));
      }
    }
  }
}

}  // namespace fitsum::io
