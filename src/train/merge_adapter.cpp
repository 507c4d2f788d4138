// Implements include/fitsum/train/merge_adapter.h.
#include "fitsum/train/merge_adapter.h"

#include <memory>
#include <stdexcept>
#include <vector>

#include "fitsum/io/checkpoint.h"
#include "fitsum/io/output_folder_lock.h"
#include "fitsum/model/lora.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/train/run_folder.h"
#include "fitsum/util/files.h"

namespace fitsum::train {

namespace {

// What in an existing output folder a merge would write over: a model or an adapter, or a training run.
std::string held_model(const fs::path& output_dir) {
  for (const char* name : {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                           "pytorch_model.bin.index.json", "config.json", "adapter_config.json"}) {
    if (util::folder_has_file(output_dir, name)) return std::string("a model (") + name + ")";
  }
  try {
    if (check_new_run_folder(output_dir)) return "a training run (trainer_state.json)";
  } catch (const std::invalid_argument&) {
    return "a training run (checkpoint folders)";
  }
  return "";
}

void refuse_inputs_as_output(const MergeRequest& request) {
  const std::vector<std::pair<const char*, std::string>> inputs = {
      {"the base model's folder", request.model.model_name_or_path},
      {"the adapter's folder", request.model.adapter_name_or_path}};
  for (const auto& [what, path] : inputs) {
    std::error_code error;
    if (!path.empty() && fs::equivalent(path, request.output_dir, error)) {
      throw std::invalid_argument("output_dir '" + request.output_dir.string() + "' is " + what +
                                  "; the merge reads it and would write over it: choose another output_dir");
    }
  }
}

nlohmann::json generation_config_of(const std::string& model_dir) {
  if (!util::folder_has_file(model_dir, "generation_config.json")) return nullptr;
  return util::read_json_file(fs::path(model_dir) / "generation_config.json");
}

}  // namespace

MergeResult merge_adapter(const MergeRequest& request) {
  if (request.model.adapter_name_or_path.empty()) {
    throw std::invalid_argument("merge needs an adapter (--adapter) to merge into the base model (--model)");
  }
  if (request.model.model_name_or_path.empty()) throw std::invalid_argument("merge needs the base model (--model)");
  const fs::path& out = request.output_dir;
  check_output_dir(out);
  refuse_inputs_as_output(request);
  std::error_code error;
  std::unique_ptr<io::OutputFolderLock> lock;
  if (fs::is_directory(out, error)) {
    // As train does: a folder that exists is locked before the model loads, so a run writing there stops this at
    // once; a new folder is made only once the merged model is ready to be written (a refused merge leaves none).
    lock = std::make_unique<io::OutputFolderLock>(out);
    const auto held = held_model(out);
    if (!held.empty() && !request.overwrite_output_dir) {
      throw std::invalid_argument("output_dir '" + out.string() + "' already holds " + held +
                                  "; pass --overwrite_output_dir to replace the files the merge writes, or choose "
                                  "another output_dir");
    }
  }
  auto loaded = io::load_model(request.model, 0);
  MergeResult result;
  result.description = loaded.description;
  result.layers_merged = 0;
  for (const auto& item : loaded.model->named_parameters()) {
    const auto& name = item.key();
    if (name.size() > 14 && name.compare(name.size() - 14, 14, ".lora_A.weight") == 0) result.layers_merged += 1;
  }
  model::merge_lora(*loaded.model);
  if (!lock) lock = std::make_unique<io::OutputFolderLock>(out);
  io::SaveOptions save;
  save.config_json = loaded.config_json;
  save.copy_tokenizer_from = loaded.tokenizer_dir;
  save.generation_config = generation_config_of(request.model.model_name_or_path);
  io::save_model_folder(*loaded.model, out, save);
  result.output_dir = out;
  return result;
}

}  // namespace fitsum::train
