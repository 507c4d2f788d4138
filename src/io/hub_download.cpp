// Implements include/fitsum/io/hub_download.h over libcurl. The reference is huggingface_hub 0.27's file_download.py:
// hf_hub_download / _hf_hub_download_to_cache_dir (the order of the cache checks), get_hf_file_metadata and
// _get_metadata_or_catch_error (the HEAD request and its headers), http_get (Range, the retries after a dropped
// connection), _download_to_tmp_and_move (.incomplete) and utils/_http.py's hf_raise_for_status (X-Error-Code).
#include "fitsum/io/hub_download.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <curl/curl.h>

namespace fitsum::io {

namespace {

// huggingface_hub (2.x) tags the cache folder when it first downloads into it, so that backup tools skip it (the
// Cache Directory Tagging Standard); the same bytes, and like it an unwritable cache is no error.
void tag_cache_dir(const fs::path& cache_dir) {
  const fs::path tag = cache_dir / "CACHEDIR.TAG";
  std::error_code error;
  if (fs::exists(tag, error) || error) return;
  std::ofstream out(tag, std::ios::binary);
  out << "Signature: 8a477f597d28d172789f06886806bc55\n"
         "# This file is a cache directory tag created by huggingface_hub.\n"
         "# For information about cache directory tags, see:\n"
         "#\thttps://bford.info/cachedir/\n";
}

constexpr const char* kUserAgent = "fitsum/0.1.0; hf_hub-compatible cache";
constexpr int kRetriesWithoutProgress = 5;  // http_get's _nb_retries

void init_curl() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct CurlDeleter {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using Curl = std::unique_ptr<CURL, CurlDeleter>;
using CurlList = std::unique_ptr<curl_slist, CurlDeleter>;

// The headers of the last response (a redirect followed or an interim 100 starts a new set), names in lower case.
struct Response {
  long status = 0;
  std::map<std::string, std::string> headers;

  std::string header(const std::string& name) const {
    const auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

std::size_t on_header(char* buffer, std::size_t size, std::size_t count, void* user) {
  auto* response = static_cast<Response*>(user);
  const std::string line(buffer, size * count);
  if (line.rfind("HTTP/", 0) == 0) response->headers.clear();
  const auto colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    const auto first = value.find_first_not_of(" \t");
    const auto last = value.find_last_not_of(" \t\r\n");
    response->headers[name] = first == std::string::npos ? "" : value.substr(first, last - first + 1);
  }
  return size * count;
}

// scheme://netloc of a URL, and its netloc (host and port, as urlparse's netloc).
std::string origin_of(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) return "";
  const auto end = url.find_first_of("/?#", scheme + 3);
  return url.substr(0, end);
}
std::string netloc_of(const std::string& url) {
  const auto origin = origin_of(url);
  const auto scheme = origin.find("://");
  return scheme == std::string::npos ? "" : origin.substr(scheme + 3);
}

Curl new_request(const std::string& url, const HubSettings& settings, long timeout_s, char* error_buffer) {
  init_curl();
  Curl h(curl_easy_init());
  if (!h) throw std::runtime_error("libcurl could not start a request");
  curl_easy_setopt(h.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(h.get(), CURLOPT_USERAGENT, kUserAgent);
  curl_easy_setopt(h.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h.get(), CURLOPT_CONNECTTIMEOUT, timeout_s);
  // requests' read timeout: no byte for timeout_s seconds ends the transfer.
  curl_easy_setopt(h.get(), CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h.get(), CURLOPT_LOW_SPEED_TIME, timeout_s);
  curl_easy_setopt(h.get(), CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(h.get(), CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h.get(), CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  error_buffer[0] = '\0';
  return h;
}

std::string curl_message(CURLcode code, const char* error_buffer) {
  return error_buffer[0] != '\0' ? std::string(error_buffer) : std::string(curl_easy_strerror(code));
}

struct Metadata {
  bool entry_missing = false;  // 404 EntryNotFound
  std::string commit;
  std::string etag;
  std::string location;  // where the bytes are: the resolve URL itself, or a CDN's
  std::uint64_t size = 0;
};

std::string describe(const HubRepo& repo, const std::string& filename) {
  return repo.repo_id + " (revision " + repo.revision + "): " + filename;
}

std::string status_text(const Response& r, const std::string& url) {
  const auto server = r.header("x-error-message");
  return "HTTP " + std::to_string(r.status) + " for " + url + (server.empty() ? "" : " (" + server + ")");
}

// hf_raise_for_status, for a resolve URL.
[[noreturn]] void throw_http_error(const Response& r, const std::string& url, const HubRepo& repo,
                                   const std::string& filename) {
  const auto code = r.header("x-error-code");
  const std::string status = status_text(r, url);
  using Kind = HubError::Kind;
  if (code == "RevisionNotFound") throw HubError(Kind::revision_missing, status);
  if (code == "GatedRepo") throw HubError(Kind::gated, status);
  if (code == "RepoNotFound" || r.status == 401) throw HubError(Kind::repository_missing, status);
  if (r.status == 403) throw HubError(Kind::forbidden, status);
  throw HubError(Kind::bad_response, describe(repo, filename) + ": " + status);
}

// One HEAD request, following relative redirects only (_request_wrapper(follow_relative_redirects=True)).
Response head(std::string& url, const HubSettings& settings) {
  for (int hop = 0;; ++hop) {
    char error_buffer[CURL_ERROR_SIZE];
    auto h = new_request(url, settings, settings.etag_timeout_s, error_buffer);
    CurlList headers(curl_slist_append(nullptr, "Accept-Encoding: identity"));
    if (!settings.token.empty()) {
      headers.reset(curl_slist_append(headers.release(), ("Authorization: Bearer " + settings.token).c_str()));
    }
    Response r;
    curl_easy_setopt(h.get(), CURLOPT_NOBODY, 1L);
    curl_easy_setopt(h.get(), CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(h.get(), CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h.get(), CURLOPT_HEADERDATA, &r);
    const CURLcode code = curl_easy_perform(h.get());
    if (code != CURLE_OK) {
      throw HubError(HubError::Kind::unreachable, url + ": " + curl_message(code, error_buffer));
    }
    curl_easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &r.status);
    const auto location = r.header("location");
    const bool relative = !location.empty() && location[0] == '/' && location.rfind("//", 0) != 0;
    if (r.status >= 300 && r.status < 400 && relative && hop < 10) {
      const auto query = url.find('?');
      url = origin_of(url) + location.substr(0, location.find('?')) +
            (query == std::string::npos ? "" : url.substr(query));
      continue;
    }
    return r;
  }
}

Metadata file_metadata(const HubRepo& repo, const std::string& filename, const HubSettings& settings) {
  std::string url = hub_file_url(settings.endpoint, repo, filename);
  const Response r = head(url, settings);
  Metadata m;
  if (r.status >= 400 && r.header("x-error-code") == "EntryNotFound") {
    m.entry_missing = true;
    m.commit = r.header("x-repo-commit");
    return m;
  }
  if (r.status >= 400) throw_http_error(r, url, repo, filename);
  m.commit = r.header("x-repo-commit");
  const auto linked = r.header("x-linked-etag");
  m.etag = normalize_etag(linked.empty() ? r.header("etag") : linked);
  m.location = r.header("location").empty() ? url : r.header("location");
  const auto linked_size = r.header("x-linked-size");
  const auto size = linked_size.empty() ? r.header("content-length") : linked_size;
  const std::string where = describe(repo, filename) + " at " + url;
  if (m.commit.empty()) {
    throw HubError(HubError::Kind::bad_response,
                   where + " has no X-Repo-Commit header: the server is not a Hugging Face Hub (check HF_ENDPOINT)");
  }
  if (m.etag.empty() || m.etag.find('/') != std::string::npos || m.etag == "." || m.etag == "..") {
    throw HubError(HubError::Kind::bad_response, where + " has no usable ETag: the download could not be checked");
  }
  try {
    std::size_t used = 0;
    m.size = std::stoull(size, &used);
    if (used != size.size()) throw std::invalid_argument(size);
  } catch (const std::exception&) {
    throw HubError(HubError::Kind::bad_response, where + " has no Content-Length");
  }
  return m;
}

// The .incomplete file a blob is downloaded into, appended to; closed on destruction.
struct PartialFile {
  int fd = -1;
  std::uint64_t size = 0;
  ~PartialFile() {
    if (fd >= 0) ::close(fd);
  }
};

struct Transfer {
  PartialFile* file = nullptr;
  Curl* handle = nullptr;
  std::uint64_t received = 0;  // this attempt's bytes
  bool discard = false;        // an error response's body
  bool checked = false;
  std::string write_error;
  const HubProgressFn* progress = nullptr;
  HubProgress state;
};

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t bytes = size * count;
  if (!t->checked) {
    t->checked = true;
    long status = 0;
    curl_easy_getinfo(t->handle->get(), CURLINFO_RESPONSE_CODE, &status);
    t->discard = status >= 300;
    // A server that ignores Range sends the whole file: start it over instead of appending it.
    if (status == 200 && t->file->size > 0) {
      if (::ftruncate(t->file->fd, 0) != 0) t->write_error = std::strerror(errno);
      t->file->size = 0;
    }
  }
  if (t->discard) return bytes;
  for (std::size_t written = 0; written < bytes;) {
    const ssize_t n = ::write(t->file->fd, data + written, bytes - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      t->write_error = std::strerror(errno);
      return 0;  // ends the transfer with CURLE_WRITE_ERROR
    }
    written += static_cast<std::size_t>(n);
  }
  t->received += bytes;
  t->file->size += bytes;
  if (*t->progress) {
    t->state.done = t->file->size;
    (*t->progress)(t->state);
  }
  return bytes;
}

bool retryable(CURLcode code) {
  return code == CURLE_PARTIAL_FILE || code == CURLE_RECV_ERROR || code == CURLE_OPERATION_TIMEDOUT ||
         code == CURLE_GOT_NOTHING || code == CURLE_SEND_ERROR || code == CURLE_HTTP2_STREAM ||
         code == CURLE_COULDNT_CONNECT;
}

struct DownloadTarget {
  std::string url;
  bool send_token = false;
  fs::path incomplete;
  std::uint64_t expected_size = 0;
};

// One GET from the partial file's end; returns what curl said, the transfer's bytes counted in `t`.
CURLcode get_once(const DownloadTarget& target, const HubSettings& settings, Transfer& t, Response& r,
                  std::string& message) {
  char error_buffer[CURL_ERROR_SIZE];
  auto h = new_request(target.url, settings, settings.download_timeout_s, error_buffer);
  t.handle = &h;
  CurlList headers;
  if (target.send_token && !settings.token.empty()) {
    // libcurl sends a custom Authorization header to the first host only, never after a redirect to another.
    headers.reset(curl_slist_append(nullptr, ("Authorization: Bearer " + settings.token).c_str()));
  }
  const std::string range = std::to_string(t.file->size) + "-";
  if (t.file->size > 0) curl_easy_setopt(h.get(), CURLOPT_RANGE, range.c_str());
  curl_easy_setopt(h.get(), CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(h.get(), CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h.get(), CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(h.get(), CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h.get(), CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(h.get(), CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h.get(), CURLOPT_WRITEDATA, &t);
  const CURLcode code = curl_easy_perform(h.get());
  curl_easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &r.status);
  message = curl_message(code, error_buffer);
  return code;
}

// _download_to_tmp_and_move's download: into `incomplete`, resumed from its size, retried after a dropped
// connection while data keeps arriving.
void download_into(const DownloadTarget& target, const HubRepo& repo, const std::string& filename,
                   const HubSettings& settings, const HubProgressFn& progress) {
  PartialFile file;
  file.fd = ::open(target.incomplete.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
  struct stat st {};
  if (file.fd < 0 || ::fstat(file.fd, &st) != 0) {
    throw std::runtime_error("cannot write '" + target.incomplete.string() + "': " + std::strerror(errno));
  }
  file.size = static_cast<std::uint64_t>(st.st_size);
  if (file.size > target.expected_size) {  // not a prefix of this blob: start over
    if (::ftruncate(file.fd, 0) != 0) throw std::runtime_error("cannot truncate '" + target.incomplete.string() + "'");
    file.size = 0;
  }
  const std::string what = describe(repo, filename);
  for (int retries = kRetriesWithoutProgress; file.size < target.expected_size;) {
    Transfer t;
    t.file = &file;
    t.progress = &progress;
    t.state = {repo.repo_id, filename, file.size, target.expected_size};
    Response r;
    std::string message;
    const CURLcode code = get_once(target, settings, t, r, message);
    if (!t.write_error.empty()) {
      throw std::runtime_error(what + ": cannot write '" + target.incomplete.string() + "': " + t.write_error);
    }
    if (code == CURLE_OK && r.status >= 300) {  // a failed download is an error even for an optional file
      throw std::runtime_error(what + ": download failed: " + status_text(r, target.url));
    }
    if (code == CURLE_OK && t.received == 0 && file.size < target.expected_size) {
      throw std::runtime_error(what + ": the server ended the file at " + std::to_string(file.size) + " of " +
                               std::to_string(target.expected_size) + " bytes");
    }
    if (code != CURLE_OK) {
      if (t.received > 0) retries = kRetriesWithoutProgress;
      if (!retryable(code) || --retries < 0) {
        throw std::runtime_error(what + ": download stopped at " + std::to_string(file.size) + " of " +
                                 std::to_string(target.expected_size) + " bytes (" + message +
                                 "); run the command again to resume it");
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));  // http_get waits a second before resuming
    }
  }
  if (file.size != target.expected_size || ::fsync(file.fd) != 0) {
    throw std::runtime_error(what + ": consistency check failed: the file should be " +
                             std::to_string(target.expected_size) + " bytes but has " + std::to_string(file.size) +
                             " (network trouble); run the command again");
  }
  if (progress) progress({repo.repo_id, filename, file.size, target.expected_size, true});
}

// flock() on the blob's lock file, as filelock's UnixFileLock takes it; released (the file kept, as there) when
// destroyed.
class BlobLock {
 public:
  explicit BlobLock(const fs::path& path) {
    fs::create_directories(path.parent_path());
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error("cannot open the lock file '" + path.string() + "': " + std::strerror(errno));
    ::fchmod(fd_, 0644);  // filelock's mode, whatever the umask
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) throw std::runtime_error("cannot lock '" + path.string() + "': " + std::strerror(errno));
    }
  }
  ~BlobLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

// The Hub could not be asked: the file cached for the revision, else `error`.
HubFile from_cache_or_throw(const HubRepoCache& cache, const HubRepo& repo, const std::string& filename,
                            const HubError& error) {
  if (const auto commit = cache.commit_of(repo.revision)) {
    const fs::path pointer = cache.pointer_path(*commit, filename);
    std::error_code ignored;
    if (fs::exists(pointer, ignored)) return {pointer, *commit};
  }
  throw error;
}

}  // namespace

std::string hub_file_url(const std::string& endpoint, const HubRepo& repo, const std::string& filename) {
  init_curl();
  const auto escape = [](const std::string& text) {
    char* escaped = curl_easy_escape(nullptr, text.c_str(), static_cast<int>(text.size()));
    std::string out = escaped != nullptr ? escaped : text;
    curl_free(escaped);
    return out;
  };
  std::string file;  // quote(filename): every part escaped, the slashes kept
  for (std::size_t start = 0;;) {
    const auto slash = filename.find('/', start);
    file += escape(filename.substr(start, slash - start));
    if (slash == std::string::npos) break;
    file += '/';
    start = slash + 1;
  }
  return endpoint + "/" + repo.repo_id + "/resolve/" + escape(repo.revision) + "/" + file;
}

HubFile hub_download(const HubRepo& repo, const std::string& filename, const HubSettings& settings,
                     const HubProgressFn& progress) {
  // refs/<revision> and snapshots/<commit> are paths in the cache: a revision may nest ("refs/pr/1"), not escape.
  const fs::path revision(repo.revision);
  if (repo.revision.empty() || revision.is_absolute() ||
      std::any_of(revision.begin(), revision.end(), [](const fs::path& part) { return part == ".." || part == "."; })) {
    throw std::invalid_argument("revision '" + repo.revision + "' is not a branch, tag or commit name");
  }
  const HubRepoCache cache(settings.cache_dir, repo.repo_id);
  if (is_commit_hash(repo.revision)) {
    const fs::path pointer = cache.pointer_path(repo.revision, filename);
    std::error_code ignored;
    if (fs::exists(pointer, ignored)) return {pointer, repo.revision};
  }
  Metadata m;
  try {
    if (settings.offline) throw HubError(HubError::Kind::offline, "offline mode is enabled (HF_HUB_OFFLINE)");
    m = file_metadata(repo, filename, settings);
  } catch (const HubError& error) {
    if (error.kind() == HubError::Kind::revision_missing) throw;
    return from_cache_or_throw(cache, repo, filename, error);
  }
  if (m.entry_missing) {
    if (!m.commit.empty()) {
      cache.mark_absent(m.commit, filename);
      cache.write_ref(repo.revision, m.commit);
    }
    return {std::nullopt, m.commit};
  }
  const fs::path blob = cache.blob_path(m.etag);
  const fs::path pointer = cache.pointer_path(m.commit, filename);
  fs::create_directories(blob.parent_path());
  fs::create_directories(pointer.parent_path());
  tag_cache_dir(cache.cache_dir());
  cache.write_ref(repo.revision, m.commit);
  std::error_code ignored;
  if (fs::exists(pointer, ignored)) return {pointer, m.commit};
  if (fs::exists(blob, ignored)) {
    cache.link_blob(blob, pointer, false);
    return {pointer, m.commit};
  }
  BlobLock lock(cache.lock_path(m.etag));
  if (!fs::exists(blob, ignored)) {  // another process may have finished it while this one waited
    const std::string hub_url = hub_file_url(settings.endpoint, repo, filename);
    DownloadTarget target{m.location, netloc_of(m.location) == netloc_of(hub_url), blob.string() + ".incomplete",
                          m.size};
    download_into(target, repo, filename, settings, progress);
    fs::rename(target.incomplete, blob);
  }
  if (!fs::exists(pointer, ignored)) cache.link_blob(blob, pointer, true);
  return {pointer, m.commit};
}

}  // namespace fitsum::io
