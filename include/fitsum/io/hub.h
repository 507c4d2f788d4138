// Model names that are Hugging Face Hub ids ("google/pegasus-cnn_dailymail"), resolved to folders as transformers'
// from_pretrained resolves them: a local folder (or file) of that name wins; otherwise the name is a repository on
// the Hub, whose files are taken from the local cache (io/hub_cache.h) or downloaded into it (io/hub_download.h),
// only those the command needs, and the folder is the cache's snapshot of the revision (its files are links into
// blobs/). The loaders (io/model_loader.h) then read it as any model folder.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "fitsum/io/hub_download.h"
#include "fitsum/io/model_loader.h"

namespace fitsum::io {

// Which of a repository's files a command needs.
struct HubFileSet {
  bool config = true;               // config.json (required)
  bool generation_config = false;   // generation_config.json (when present)
  bool weights = false;             // model.safetensors, else its sharded index and shards, else pytorch_model.bin,
                                    // else its index and shards (one of them required)
  bool tokenizer = false;           // the tokenizer files that are present (tokenizer_file_names())

  static HubFileSet model() { return {true, true, true, true}; }
  static HubFileSet tokenizer_only() { return {false, false, false, true}; }
};

// How names are looked up beyond the environment (HubSettings::from_environment).
struct HubOptions {
  std::string revision;   // a branch, tag or commit; empty: "main"
  std::string cache_dir;  // empty: the environment's cache
  std::string token;      // empty: the environment's (HF_TOKEN, the token file)
  HubProgressFn progress;
};

// The folder `name` means for a command that needs `files`: `name` as it is when something exists there, or when it
// is not a Hub id (the loaders then say what is wrong with it); else the snapshot folder of the repository `name`
// at the revision, once the files are cached. Throws std::runtime_error naming the model, the file and the fix
// when a required file can be neither found in the cache nor downloaded (offline, unreachable, unknown or gated
// repository, no such revision or file).
std::filesystem::path resolve_model_folder(const std::string& name, const HubFileSet& files,
                                           const HubOptions& options);

// `source` with each of its names that is a Hub id replaced by its snapshot folder (model_name_or_path: the model's
// files, its tokenizer's unless tokenizer_name is given; config_name: config.json, with the tokenizer files unless
// tokenizer_name is given; tokenizer_name: the tokenizer files), at source.revision in source.cache_dir.
ModelSource resolve_model_source(const ModelSource& source, const HubProgressFn& progress = {});

// The whole model (HubFileSet::model()) at `options.revision`, for later offline use: its snapshot folder.
std::filesystem::path download_model(const std::string& repo_id, const HubOptions& options);

}  // namespace fitsum::io
