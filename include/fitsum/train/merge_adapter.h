// `fitsum merge`: a LoRA adapter merged into its base model (PEFT's merge_and_unload: W += scaling B A, adapters
// removed) and saved as a full Hugging Face model folder (model.safetensors, config.json, generation_config.json and
// the base's tokenizer files, as `train` saves a full model), which transformers' from_pretrained loads.
//
// The output folder follows the rules of `train`'s output_dir: what it names is checked before anything loads, a
// folder that already holds a model or a training run is refused unless overwrite_output_dir (which replaces the files
// the merge writes, each atomically, and removes nothing), the folder's lock (io/output_folder_lock.h) is held while
// writing, so a training run into it and a merge exclude each other, and neither the base model's folder nor the
// adapter's may be the output folder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "fitsum/io/model_loader.h"

namespace fitsum::train {

namespace fs = std::filesystem;

struct MergeRequest {
  io::ModelSource model;  // the base: model_name_or_path (a folder, a resolved Hub id), with adapter_name_or_path
  fs::path output_dir;
  bool overwrite_output_dir = false;
};

struct MergeResult {
  std::string description;  // the base and the adapter, as load_model describes them
  std::int64_t layers_merged = 0;
  fs::path output_dir;
};

// Throws std::invalid_argument for a usage error (no adapter, an output folder that holds a model or is an input),
// std::runtime_error for bad folders and files, io::OutputFolderBusy when a run holds the output folder.
MergeResult merge_adapter(const MergeRequest& request);

}  // namespace fitsum::train
