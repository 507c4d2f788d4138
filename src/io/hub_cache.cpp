// Implements include/fitsum/io/hub_cache.h. The reference is huggingface_hub 0.27: constants.py (the environment),
// utils/_validators.py (validate_repo_id), utils/_auth.py (get_token) and file_download.py (repo_folder_name,
// _normalize_etag, _get_pointer_path, _cache_commit_hash_for_specific_revision, _create_symlink,
// try_to_load_from_cache); transformers 4.47's utils/hub.py for TRANSFORMERS_CACHE.
#include "fitsum/io/hub_cache.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <system_error>

#include "fitsum/util/files.h"

namespace fitsum::io {

namespace {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// os.getenv(name) or fallback: an empty value counts as unset where huggingface_hub writes `or`.
std::optional<std::string> env_nonempty(const char* name) {
  auto value = env(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

// constants._is_true.
bool is_true(const std::optional<std::string>& value) {
  if (!value) return false;
  std::string upper = *value;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  return upper == "1" || upper == "ON" || upper == "YES" || upper == "TRUE";
}

// os.path.expanduser for a leading "~" or "~/".
std::string expand_user(const std::string& path) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  const auto home = env("HOME");
  return home ? *home + path.substr(1) : path;
}

long env_seconds(const char* name, long fallback) {
  const auto value = env_nonempty(name);
  if (!value) return fallback;
  try {
    const long seconds = std::stol(*value);
    return seconds > 0 ? seconds : fallback;
  } catch (const std::exception&) {
    throw std::invalid_argument(std::string(name) + "='" + *value + "' is not a whole number of seconds");
  }
}

// utils/_auth._clean_token: carriage returns and newlines removed, then surrounding spaces.
std::string clean_token(std::string token) {
  token.erase(std::remove_if(token.begin(), token.end(), [](char c) { return c == '\r' || c == '\n'; }), token.end());
  const auto first = token.find_first_not_of(" \t\f\v");
  if (first == std::string::npos) return "";
  return token.substr(first, token.find_last_not_of(" \t\f\v") - first + 1);
}

fs::path hub_cache_from_environment(const std::string& hf_home) {
  for (const char* name : {"TRANSFORMERS_CACHE", "PYTORCH_TRANSFORMERS_CACHE", "PYTORCH_PRETRAINED_BERT_CACHE",
                           "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}) {
    if (auto value = env(name)) return *value;
  }
  return fs::path(hf_home) / "hub";
}

void read_token(HubSettings& s, const std::string& hf_home) {
  if (is_true(env("HF_HUB_DISABLE_IMPLICIT_TOKEN"))) return;
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    if (auto value = env_nonempty(name)) {
      s.token = clean_token(*value);
      s.token_source = name;
      return;
    }
  }
  const fs::path file = env("HF_TOKEN_PATH").value_or((fs::path(hf_home) / "token").string());
  if (!util::folder_has_file(file.parent_path(), file.filename().string())) return;
  s.token = clean_token(util::read_file(file, 1 << 20));
  if (!s.token.empty()) s.token_source = file.string();
}

}  // namespace

HubSettings HubSettings::from_environment() {
  HubSettings s;
  if (auto endpoint = env_nonempty("HF_ENDPOINT")) s.endpoint = *endpoint;
  while (s.endpoint.size() > 1 && s.endpoint.back() == '/') s.endpoint.pop_back();
  const std::string xdg = env("XDG_CACHE_HOME").value_or(expand_user("~/.cache"));
  const std::string hf_home = expand_user(env("HF_HOME").value_or((fs::path(xdg) / "huggingface").string()));
  s.cache_dir = hub_cache_from_environment(hf_home);
  // `HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE`: a non-empty HF_HUB_OFFLINE decides, even when it is "0".
  auto offline = env_nonempty("HF_HUB_OFFLINE");
  s.offline = is_true(offline ? offline : env("TRANSFORMERS_OFFLINE"));
  read_token(s, hf_home);
  s.etag_timeout_s = env_seconds("HF_HUB_ETAG_TIMEOUT", 10);
  s.download_timeout_s = env_seconds("HF_HUB_DOWNLOAD_TIMEOUT", 10);
  s.progress_bars = !is_true(env("HF_HUB_DISABLE_PROGRESS_BARS"));
  return s;
}

namespace {

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

// One part of REPO_ID_REGEX: word characters, '-' and '.', starting and ending at a word boundary (so neither '-'
// nor '.' at either end).
bool valid_part(std::string_view part, std::size_t max_length) {
  if (part.empty() || part.size() > max_length) return false;
  if (!std::all_of(part.begin(), part.end(), name_char)) return false;
  const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  return word(part.front()) && word(part.back());
}

}  // namespace

bool is_repo_id(std::string_view name) {
  const auto slash = name.find('/');
  if (slash != std::string_view::npos && name.find('/', slash + 1) != std::string_view::npos) return false;
  const std::string_view repo = slash == std::string_view::npos ? name : name.substr(slash + 1);
  if (slash != std::string_view::npos && !valid_part(name.substr(0, slash), name.size())) return false;
  if (!valid_part(repo, 96)) return false;
  if (name.find("--") != std::string_view::npos || name.find("..") != std::string_view::npos) return false;
  return !(name.size() >= 4 && name.substr(name.size() - 4) == ".git");
}

bool is_commit_hash(std::string_view revision) {
  return revision.size() == 40 && std::all_of(revision.begin(), revision.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string repo_folder_name(std::string_view repo_id) {
  std::string name = "models";
  std::size_t start = 0;
  while (true) {
    const auto slash = repo_id.find('/', start);
    name += "--" + std::string(repo_id.substr(start, slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return name;
}

std::string normalize_etag(std::string_view etag) {
  // etag.lstrip("W/").strip('"'): lstrip takes away every leading 'W' and '/', as Python's does.
  while (!etag.empty() && (etag.front() == 'W' || etag.front() == '/')) etag.remove_prefix(1);
  while (!etag.empty() && etag.front() == '"') etag.remove_prefix(1);
  while (!etag.empty() && etag.back() == '"') etag.remove_suffix(1);
  return std::string(etag);
}

std::optional<std::string> repo_id_of_snapshot(const fs::path& folder) {
  const fs::path normal = folder.lexically_normal();
  const fs::path commit = normal.has_filename() ? normal : normal.parent_path();
  const fs::path snapshots = commit.parent_path();
  const std::string repo = snapshots.parent_path().filename().string();
  if (snapshots.filename() != "snapshots" || repo.rfind("models--", 0) != 0) return std::nullopt;
  std::string id;
  for (std::size_t start = 8;;) {
    const auto separator = repo.find("--", start);
    id += (id.empty() ? "" : "/") + repo.substr(start, separator - start);
    if (separator == std::string::npos) break;
    start = separator + 2;
  }
  return id;
}

HubRepoCache::HubRepoCache(fs::path cache_dir, std::string repo_id)
    : cache_dir_(std::move(cache_dir)),
      repo_id_(std::move(repo_id)),
      folder_(cache_dir_ / repo_folder_name(repo_id_)) {}

fs::path HubRepoCache::blob_path(const std::string& etag) const { return folder_ / "blobs" / etag; }

fs::path HubRepoCache::lock_path(const std::string& etag) const {
  return cache_dir_ / ".locks" / repo_folder_name(repo_id_) / (etag + ".lock");
}

fs::path HubRepoCache::snapshot_folder(const std::string& commit) const { return folder_ / "snapshots" / commit; }

fs::path HubRepoCache::pointer_path(const std::string& commit, const std::string& filename) const {
  const fs::path snapshots = fs::absolute(folder_ / "snapshots").lexically_normal();
  const fs::path pointer = fs::absolute(snapshots / commit / filename).lexically_normal();
  const auto inside = pointer.lexically_relative(snapshots);
  if (commit.empty() || filename.empty() || inside.empty() || *inside.begin() == ".." ||
      inside.begin()->string() != commit || pointer.filename().empty()) {
    throw std::runtime_error(repo_id_ + ": the file name '" + filename + "' at revision '" + commit +
                             "' would lie outside the cache's snapshot folder; the repository's listing is corrupt");
  }
  return folder_ / "snapshots" / commit / filename;
}

std::optional<std::string> HubRepoCache::commit_of(const std::string& revision) const {
  if (is_commit_hash(revision)) return revision;
  const fs::path ref = folder_ / "refs" / revision;
  if (!util::folder_has_file(ref.parent_path(), ref.filename().string())) return std::nullopt;
  return util::read_file(ref, 4096);
}

void HubRepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return;
  const fs::path ref = folder_ / "refs" / revision;
  fs::create_directories(ref.parent_path());
  if (util::folder_has_file(ref.parent_path(), ref.filename().string()) && util::read_file(ref, 4096) == commit) return;
  util::write_file_atomic(ref, commit);
}

void HubRepoCache::mark_absent(const std::string& commit, const std::string& filename) const {
  // The same containment rule as a pointer: the marker mirrors the snapshot's layout.
  const fs::path relative = pointer_path(commit, filename).lexically_relative(folder_ / "snapshots");
  const fs::path marker = folder_ / ".no_exist" / relative;
  std::error_code error;
  fs::create_directories(marker.parent_path(), error);
  if (!error && !fs::exists(marker, error)) util::write_file_atomic(marker, "");
}

void HubRepoCache::link_blob(const fs::path& blob, const fs::path& pointer, bool new_blob) const {
  std::error_code error;
  fs::remove(pointer, error);
  fs::create_directories(pointer.parent_path());
  const fs::path from = fs::absolute(pointer.parent_path()).lexically_normal();
  const fs::path target = fs::absolute(blob).lexically_normal().lexically_relative(from);
  fs::create_symlink(target, pointer, error);
  if (!error) return;
  if (error == std::errc::file_exists && fs::equivalent(pointer, blob, error)) return;  // another process made it
  if (new_blob) {
    fs::rename(blob, pointer);
  } else {
    fs::copy_file(blob, pointer, fs::copy_options::overwrite_existing);
  }
}

CachedFile HubRepoCache::lookup(const std::string& revision, const std::string& filename) const {
  std::error_code error;
  if (!fs::is_directory(folder_, error)) return {};
  const std::string commit = commit_of(revision).value_or(revision);
  const fs::path marker = folder_ / ".no_exist" / commit / filename;
  if (fs::is_regular_file(marker, error)) return {CachedFile::State::absent, {}};
  if (!fs::is_directory(folder_ / "snapshots" / commit, error)) return {};
  const fs::path pointer = pointer_path(commit, filename);
  if (fs::is_regular_file(pointer, error)) return {CachedFile::State::found, pointer};
  return {};
}

}  // namespace fitsum::io
