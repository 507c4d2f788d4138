// Hugging Face's model cache on disk, as huggingface_hub 0.27 lays it out (file_download.py), so that a model that
// transformers downloaded is used as it is and what fitsum downloads is reused by transformers:
//
//   <cache>/models--<org>--<name>/refs/<revision>              the commit a branch or tag resolved to (no newline)
//   <cache>/models--<org>--<name>/snapshots/<commit>/<file>    a relative symbolic link to ../../blobs/<etag>
//   <cache>/models--<org>--<name>/blobs/<etag>                 the file's bytes (.incomplete while downloading)
//   <cache>/models--<org>--<name>/.no_exist/<commit>/<file>    empty: the repository has no such file at that commit
//   <cache>/.locks/models--<org>--<name>/<etag>.lock           flock()ed while the blob is downloaded
//
// Where the cache is, and the rest of huggingface_hub's and transformers' settings, come from the environment
// (HubSettings). Nothing here talks to the network: io/hub_download.h does.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace fitsum::io {

namespace fs = std::filesystem;

// huggingface_hub's constants.py and transformers' utils/hub.py, read from the environment.
struct HubSettings {
  // HF_ENDPOINT (a mirror), else https://huggingface.co.
  std::string endpoint = "https://huggingface.co";
  // transformers' cache: TRANSFORMERS_CACHE, PYTORCH_TRANSFORMERS_CACHE, PYTORCH_PRETRAINED_BERT_CACHE (deprecated,
  // still honoured by transformers 4.x), else huggingface_hub's HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, $HF_HOME/hub,
  // $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub.
  fs::path cache_dir;
  // HF_HUB_OFFLINE, else TRANSFORMERS_OFFLINE: 1, ON, YES or TRUE (any case).
  bool offline = false;
  // HF_TOKEN, else HUGGING_FACE_HUB_TOKEN, else the file HF_TOKEN_PATH ($HF_HOME/token) that `huggingface-cli
  // login` writes; none with HF_HUB_DISABLE_IMPLICIT_TOKEN. Empty: no token.
  std::string token;
  std::string token_source;  // where the token came from, for messages ("HF_TOKEN", the token file's path)
  long etag_timeout_s = 10;     // HF_HUB_ETAG_TIMEOUT: the metadata request
  long download_timeout_s = 10;  // HF_HUB_DOWNLOAD_TIMEOUT: connecting, and the longest wait for data
  bool progress_bars = true;     // false with HF_HUB_DISABLE_PROGRESS_BARS

  static HubSettings from_environment();
};

// huggingface_hub's validate_repo_id: "name" or "namespace/name" of letters, digits, '-', '_' and '.', no "--" or
// "..", neither starting nor ending with '-' or '.', at most 96 characters in the name, not ending in ".git".
bool is_repo_id(std::string_view name);
// A full commit hash: 40 lowercase hexadecimal digits.
bool is_commit_hash(std::string_view revision);
// "models--org--name" (repo_folder_name).
std::string repo_folder_name(std::string_view repo_id);
// The ETag header as a blob name: a leading W/ and the quotes removed (_normalize_etag).
std::string normalize_etag(std::string_view etag);
// "org/name" for a cache snapshot folder (<cache>/models--org--name/snapshots/<commit>), else nothing.
std::optional<std::string> repo_id_of_snapshot(const fs::path& folder);

// What the cache knows about one file at one revision (try_to_load_from_cache).
struct CachedFile {
  enum class State { not_cached, absent, found };
  State state = State::not_cached;
  fs::path path;  // found: the snapshot's pointer
};

// One repository's folder in a cache.
class HubRepoCache {
 public:
  HubRepoCache(fs::path cache_dir, std::string repo_id);

  const fs::path& cache_dir() const { return cache_dir_; }
  const fs::path& folder() const { return folder_; }
  fs::path blob_path(const std::string& etag) const;
  fs::path lock_path(const std::string& etag) const;
  fs::path snapshot_folder(const std::string& commit) const;
  // snapshots/<commit>/<filename>; throws std::runtime_error when the name would leave the snapshot ("../x").
  fs::path pointer_path(const std::string& commit, const std::string& filename) const;

  // The commit `revision` names: itself when it is a commit hash, else the content of refs/<revision>.
  std::optional<std::string> commit_of(const std::string& revision) const;
  // refs/<revision> := commit, unless the revision is that commit or the ref already says so.
  void write_ref(const std::string& revision, const std::string& commit) const;
  // .no_exist/<commit>/<filename>: the repository has no such file at that commit.
  void mark_absent(const std::string& commit, const std::string& filename) const;
  // The snapshot's pointer to a blob: a relative symbolic link, replacing whatever was there (_create_symlink);
  // where links cannot be made, the blob is moved (a new blob) or copied there.
  void link_blob(const fs::path& blob, const fs::path& pointer, bool new_blob) const;
  // try_to_load_from_cache.
  CachedFile lookup(const std::string& revision, const std::string& filename) const;

 private:
  fs::path cache_dir_;
  std::string repo_id_;
  fs::path folder_;
};

}  // namespace fitsum::io
