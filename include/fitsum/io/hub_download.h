// One file of a Hub repository, from the cache or downloaded into it, as huggingface_hub 0.27's hf_hub_download
// does (file_download.py), over libcurl:
// - a revision that is a commit hash, with the file in its snapshot: the cached file, with no request;
// - otherwise a HEAD request to {endpoint}/{repo_id}/resolve/{revision}/{filename} (redirects not followed, except
//   relative ones: a renamed repository) gives the commit (X-Repo-Commit), the blob's name (X-Linked-Etag, else
//   ETag), its size (X-Linked-Size, else Content-Length) and where to download it (Location: a CDN for large files);
// - a file the repository lacks (404 EntryNotFound) is remembered in .no_exist/<commit>/ and reported as absent;
// - when the Hub cannot be asked (HF_HUB_OFFLINE, no connection, a server error, a gated or unknown repository), the
//   file cached for that revision (refs/<revision> -> snapshots/<commit>/) is used, else the reason is thrown;
// - a blob not yet cached is downloaded under a lock on .locks/<repo folder>/<etag>.lock (flock, the lock
//   huggingface_hub's filelock takes), into blobs/<etag>.incomplete, resumed with a Range request where an earlier
//   attempt stopped (within this call after a dropped connection, or from an earlier run), checked against the size,
//   then renamed to blobs/<etag> and linked from the snapshot.
// The token (HubSettings::token) is sent to the Hub's host only: never to a CDN on another host.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "fitsum/io/hub_cache.h"

namespace fitsum::io {

struct HubRepo {
  std::string repo_id;            // "org/name"
  std::string revision = "main";  // a branch, a tag or a commit hash
};

// A download's progress, for the command line to draw (tqdm's bytes, as huggingface_hub shows them).
struct HubProgress {
  std::string repo_id;
  std::string filename;
  std::uint64_t done = 0;   // bytes in the blob so far, a resumed download's earlier bytes included
  std::uint64_t total = 0;  // the blob's size
  bool finished = false;    // the last call for this file
};
using HubProgressFn = std::function<void(const HubProgress&)>;

// Why the Hub did not give a file, as huggingface_hub's error classes say it.
class HubError : public std::runtime_error {
 public:
  enum class Kind {
    offline,             // HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE (OfflineModeIsEnabled)
    unreachable,         // no connection, a timeout (requests' ConnectionError, Timeout)
    repository_missing,  // RepositoryNotFoundError: unknown, or private without a token that may read it
    gated,               // GatedRepoError
    forbidden,           // 403 without an error code: the token lacks a permission
    revision_missing,    // RevisionNotFoundError
    bad_response,        // FileMetadataError (no X-Repo-Commit, ETag or size: not a Hub), other HTTP errors
  };
  HubError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// What hf_hub_download found for one file.
struct HubFile {
  std::optional<fs::path> path;  // the snapshot's pointer; empty: the repository has no such file
  std::string commit;            // the commit the file belongs to ("" when it was not found)
};

// hf_hub_download(repo_id, filename, revision, cache_dir=settings.cache_dir). Throws HubError when the file is
// neither cached nor obtainable (HEAD failed, or the repository or revision does not exist), and
// std::runtime_error for a failed download (the .incomplete file is kept, to be resumed).
HubFile hub_download(const HubRepo& repo, const std::string& filename, const HubSettings& settings,
                     const HubProgressFn& progress = {});

// {endpoint}/{repo_id}/resolve/{revision}/{filename}, the revision and file name percent-encoded (hf_hub_url).
std::string hub_file_url(const std::string& endpoint, const HubRepo& repo, const std::string& filename);

}  // namespace fitsum::io
