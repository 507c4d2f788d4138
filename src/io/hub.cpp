// Implements include/fitsum/io/hub.h. The reference is transformers 4.47: utils/hub.py's cached_file (a local
// folder first; optional files skipped when missing or unreachable; its error messages), modeling_utils.py's
// from_pretrained (the order of the weight files: model.safetensors, model.safetensors.index.json,
// pytorch_model.bin, pytorch_model.bin.index.json) and the tokenizer files AutoTokenizer reads.
#include "fitsum/io/hub.h"

#include <optional>
#include <set>
#include <stdexcept>
#include <system_error>

#include "fitsum/io/checkpoint.h"
#include "fitsum/util/files.h"

namespace fitsum::io {

namespace {

bool exists_locally(const std::string& name) {
  std::error_code error;
  return fs::exists(fs::symlink_status(name, error));
}

std::string settings_text(const HubSettings& s) {
  return "Hub " + s.endpoint + ", cache " + s.cache_dir.string();
}

std::string login_hint(const HubSettings& s) {
  return s.token.empty() ? "no token was sent: log in with `huggingface-cli login` or set HF_TOKEN"
                         : "the token from " + s.token_source + " was sent";
}

// One repository's files for one command: each from the cache or the Hub, into one snapshot.
class SnapshotResolver {
 public:
  SnapshotResolver(std::string name, HubSettings settings, const HubOptions& options)
      : repo_{std::move(name), options.revision.empty() ? "main" : options.revision},
        settings_(std::move(settings)),
        progress_(options.progress) {}

  // A file that must exist; throws the reason it cannot be had.
  fs::path required(const std::string& filename) {
    const auto found = fetch(filename, true);
    if (!found) {
      throw std::runtime_error(repo_.repo_id + " (revision " + repo_.revision + ") has no " + filename +
                               "; check the name at " + settings_.endpoint + "/" + repo_.repo_id);
    }
    return *found;
  }
  // A file that may be missing (or unreachable): its path, else nothing.
  std::optional<fs::path> optional(const std::string& filename) { return fetch(filename, false); }

  fs::path folder() const {
    if (commit_.empty()) {
      throw std::runtime_error("'" + repo_.repo_id + "' is not a local folder, and none of the files needed was " +
                               "found in the cache or on the Hub (" + settings_text(settings_) + ")");
    }
    return HubRepoCache(settings_.cache_dir, repo_.repo_id).snapshot_folder(commit_);
  }
  const HubRepo& repo() const { return repo_; }
  // Why the first optional file that could not be had was skipped (offline, unreachable), if one was.
  const std::optional<std::string>& skipped() const { return skipped_; }
  void forget_skipped() { skipped_.reset(); }

 private:
  std::optional<fs::path> fetch(const std::string& filename, bool required) {
    if (unreachable_) settings_.offline = true;  // one timeout, not one per file
    HubFile file;
    try {
      file = hub_download(repo_, filename, settings_, progress_);
    } catch (const HubError& error) {
      if (error.kind() == HubError::Kind::unreachable && !unreachable_) unreachable_ = error.what();
      const HubRepoCache cache(settings_.cache_dir, repo_.repo_id);
      const bool known_absent = cache.lookup(repo_.revision, filename).state == CachedFile::State::absent;
      if (skippable(error.kind()) && (!required || known_absent)) {
        if (!known_absent && !skipped_) skipped_ = explain(error, filename);
        return std::nullopt;
      }
      throw std::runtime_error(explain(error, filename));
    }
    if (file.path) note_commit(file.commit, filename);
    return file.path;
  }

  // transformers skips an optional file it cannot reach; an unknown, gated or forbidden repository and an unknown
  // revision stop every file.
  static bool skippable(HubError::Kind kind) {
    return kind == HubError::Kind::offline || kind == HubError::Kind::unreachable ||
           kind == HubError::Kind::bad_response;
  }

  void note_commit(const std::string& commit, const std::string& filename) {
    if (commit_.empty()) commit_ = commit;
    if (commit != commit_) {
      throw std::runtime_error(repo_.repo_id + ": revision " + repo_.revision + " moved from commit " + commit_ +
                               " to " + commit + " while " + filename + " was fetched; run the command again");
    }
  }

  std::string explain(const HubError& error, const std::string& filename) const {
    const std::string& id = repo_.repo_id;
    const std::string page = settings_.endpoint + "/" + id;
    const std::string missing = "'" + id + "' is not a local folder, and its " + filename + " is not in the cache (" +
                                settings_.cache_dir.string() + ")";
    const auto kind = error.kind() == HubError::Kind::offline && unreachable_ ? HubError::Kind::unreachable
                                                                               : error.kind();
    switch (kind) {
      case HubError::Kind::offline:
        return missing + " while offline mode is on (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE): run `fitsum download " +
               id + "` where the Hub can be reached, or turn offline mode off";
      case HubError::Kind::unreachable:
        return missing + " and the Hub cannot be reached (" + (unreachable_ ? *unreachable_ : error.what()) +
               "): check the name and the connection (HF_ENDPOINT for a mirror), or copy the model's cache folder here";
      case HubError::Kind::repository_missing:
        return "'" + id + "' is neither a local folder nor a model on the Hub (" + error.what() +
               "): check the name; for a private model, " + login_hint(settings_);
      case HubError::Kind::gated:
        return id + " is a gated model (" + error.what() + "): accept its conditions at " + page + ", then log in " +
               "with `huggingface-cli login` or set HF_TOKEN to a token of that account (" +
               (settings_.token.empty() ? "no token was sent" : "the token from " + settings_.token_source +
                                                                    " was refused") + ")";
      case HubError::Kind::forbidden:
        return id + ": " + error.what() + ": " + login_hint(settings_) + " and lacks the permission to read it";
      case HubError::Kind::revision_missing:
        return "revision '" + repo_.revision + "' is not a branch, tag or commit of " + id + " (" + error.what() +
               "); see " + page;
      case HubError::Kind::bad_response:
        break;
    }
    return std::string(error.what()) + " (" + settings_text(settings_) + ")";
  }

  HubRepo repo_;
  HubSettings settings_;
  HubProgressFn progress_;
  std::string commit_;
  std::optional<std::string> unreachable_;
  std::optional<std::string> skipped_;
};

// The shard file names of a *.index.json's weight_map.
std::set<std::string> shard_names(const fs::path& index_file) {
  const auto index = util::read_json_file(index_file);
  const auto map = index.is_object() ? index.find("weight_map") : index.end();
  if (map == index.end() || !map->is_object()) {
    throw std::runtime_error("'" + index_file.string() + "' has no \"weight_map\" object; download it again");
  }
  std::set<std::string> names;
  for (const auto& value : *map) {
    if (!value.is_string()) throw std::runtime_error("'" + index_file.string() + "': a shard is not a file name");
    names.insert(value.get<std::string>());
  }
  return names;
}

// from_pretrained's order: model.safetensors, its sharded index, pytorch_model.bin, its sharded index.
void fetch_weights(SnapshotResolver& resolver) {
  resolver.forget_skipped();
  for (const char* single : {"model.safetensors", "pytorch_model.bin"}) {
    if (resolver.optional(single)) return;
    const std::string index_name = std::string(single) + ".index.json";
    if (const auto index = resolver.optional(index_name)) {
      for (const auto& shard : shard_names(*index)) resolver.required(shard);
      return;
    }
  }
  if (resolver.skipped()) throw std::runtime_error(*resolver.skipped());  // offline or unreachable, not absent
  throw std::runtime_error(resolver.repo().repo_id + " (revision " + resolver.repo().revision +
                           ") has no weights that could be found or downloaded (model.safetensors, "
                           "model.safetensors.index.json, pytorch_model.bin, pytorch_model.bin.index.json); to "
                           "start from random weights pass it as --config_name instead");
}

HubSettings settings_for(const HubOptions& options) {
  auto settings = HubSettings::from_environment();
  if (!options.cache_dir.empty()) settings.cache_dir = options.cache_dir;
  if (!options.token.empty()) {
    settings.token = options.token;
    settings.token_source = "--token";
  }
  return settings;
}

// The repository's snapshot folder once `files` are cached.
fs::path fetch_snapshot(const std::string& repo_id, const HubFileSet& files, const HubOptions& options) {
  HubSettings settings = settings_for(options);
  HubOptions quiet = options;
  if (!settings.progress_bars) quiet.progress = nullptr;
  SnapshotResolver resolver(repo_id, std::move(settings), quiet);
  if (files.config) {
    resolver.required("config.json");
  } else {
    resolver.optional("config.json");  // the tokenizer's family (model_type), when it has no tokenizer_config.json
  }
  if (files.generation_config) resolver.optional("generation_config.json");
  if (files.weights) fetch_weights(resolver);
  if (files.tokenizer) {
    for (const auto& file : tokenizer_file_names()) resolver.optional(file);
  }
  return resolver.folder();
}

}  // namespace

fs::path resolve_model_folder(const std::string& name, const HubFileSet& files, const HubOptions& options) {
  if (name.empty() || exists_locally(name) || !is_repo_id(name)) return name;
  return fetch_snapshot(name, files, options);
}

ModelSource resolve_model_source(const ModelSource& source, const HubProgressFn& progress) {
  const HubOptions options{source.revision, source.cache_dir, source.token, progress};
  const bool own_tokenizer = source.tokenizer_name.empty();
  ModelSource resolved = source;
  if (!source.model_name_or_path.empty()) {
    auto files = HubFileSet::model();
    files.tokenizer = own_tokenizer;
    resolved.model_name_or_path = resolve_model_folder(source.model_name_or_path, files, options).string();
  }
  if (!source.config_name.empty()) {
    HubFileSet files;
    files.tokenizer = own_tokenizer;
    resolved.config_name = resolve_model_folder(source.config_name, files, options).string();
  }
  if (!own_tokenizer) {
    resolved.tokenizer_name =
        resolve_model_folder(source.tokenizer_name, HubFileSet::tokenizer_only(), options).string();
  }
  return resolved;
}

fs::path download_model(const std::string& repo_id, const HubOptions& options) {
  if (!is_repo_id(repo_id)) {
    throw std::invalid_argument("'" + repo_id + "' is not a Hub model id: 'name' or 'org/name' of letters, digits, " +
                                "'-', '_' and '.'");
  }
  return fetch_snapshot(repo_id, HubFileSet::model(), options);
}

}  // namespace fitsum::io
