// Implements tests/support/hub_server.h over POSIX sockets: one thread per listener accepting, one per connection.
// The responses follow what huggingface_hub 0.27 reads from the Hub (file_download.py's get_hf_file_metadata,
// utils/_http.py's hf_raise_for_status).
#include "hub_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <openssl/evp.h>

namespace fitsum::test {

namespace {

std::string hex_digest(const EVP_MD* md, const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, md, nullptr);
  std::string hex;
  char part[3];
  for (unsigned int i = 0; i < size; ++i) {
    std::snprintf(part, sizeof part, "%02x", digest[i]);
    hex += part;
  }
  return hex;
}

void send_all(int fd, const std::string& bytes) {
  for (std::size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the client went away
    sent += static_cast<std::size_t>(n);
  }
}

std::string url_decode(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string response_head(int status, const std::string& reason, const std::vector<std::string>& headers) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
  for (const auto& h : headers) head += h + "\r\n";
  return head + "Connection: close\r\n\r\n";
}

// "bytes=N-": N; 0 without a Range.
std::uint64_t range_start(const std::map<std::string, std::string>& headers) {
  const auto it = headers.find("range");
  if (it == headers.end() || it->second.rfind("bytes=", 0) != 0) return 0;
  return std::stoull(it->second.substr(6));
}

// The body (or its tail from a Range request) with its status line and length headers.
std::string content(const std::string& bytes, std::uint64_t from, std::vector<std::string> headers, bool with_body) {
  const bool partial = from > 0 && from < bytes.size();
  if (from >= bytes.size() && from > 0) {
    return response_head(416, "Range Not Satisfiable", {"Content-Range: bytes */" + std::to_string(bytes.size())});
  }
  headers.push_back("Content-Length: " + std::to_string(bytes.size() - from));
  if (partial) {
    headers.push_back("Content-Range: bytes " + std::to_string(from) + "-" + std::to_string(bytes.size() - 1) + "/" +
                      std::to_string(bytes.size()));
  }
  return response_head(partial ? 206 : 200, partial ? "Partial Content" : "OK", headers) +
         (with_body ? bytes.substr(from) : "");
}

std::string quoted(const std::string& text) { return "\"" + text + "\""; }

}  // namespace

std::string HubServer::git_blob_sha1(const std::string& bytes) {
  return hex_digest(EVP_sha1(), "blob " + std::to_string(bytes.size()) + std::string(1, '\0') + bytes);
}

std::string HubServer::sha256(const std::string& bytes) { return hex_digest(EVP_sha256(), bytes); }

HubServer::HubServer() {
  start(hub_, "hub");
  start(cdn_, "cdn");
}

HubServer::~HubServer() {
  stopping_ = true;
  for (Listener* l : {&hub_, &cdn_}) ::shutdown(l->fd, SHUT_RDWR);
  for (Listener* l : {&hub_, &cdn_}) {
    if (l->thread.joinable()) l->thread.join();
    ::close(l->fd);
  }
  std::vector<std::thread> connections;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    connections.swap(connections_);
  }
  for (auto& t : connections) t.join();
}

void HubServer::start(Listener& listener, const std::string& name) {
  listener.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  if (listener.fd < 0 || ::bind(listener.fd, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
      ::listen(listener.fd, 64) != 0 || ::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    throw std::runtime_error("the test Hub server could not listen on 127.0.0.1");
  }
  listener.port = ntohs(address.sin_port);
  listener.thread = std::thread([this, &listener, name] {
    while (!stopping_) {
      const int fd = ::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (stopping_) return;
        continue;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      open_fds_.push_back(fd);
      connections_.emplace_back([this, fd, name] { serve(fd, name); });
    }
  });
}

void HubServer::serve(int fd, const std::string& name) {
  std::string request;
  char buffer[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 65536) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    request.append(buffer, static_cast<std::size_t>(n));
  }
  std::istringstream lines(request);
  std::string method, path, line;
  lines >> method >> path;
  std::getline(lines, line);
  std::map<std::string, std::string> headers;
  while (std::getline(lines, line) && line != "\r" && !line.empty()) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    while (!value.empty() && (value.back() == '\r' || value.back() == ' ')) value.pop_back();
    headers[key] = value;
  }
  if (!method.empty()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      requests_.push_back({name, method, path, headers.count("authorization") ? headers["authorization"] : "",
                           headers.count("range") ? headers["range"] : ""});
    }
    if (name == "hub") {
      send_all(fd, answer_hub(fd, headers, method, path));
    } else {
      answer_cdn(fd, headers, path);
    }
  }
  ::shutdown(fd, SHUT_WR);
  while (::recv(fd, buffer, sizeof buffer, 0) > 0) {
  }
  std::lock_guard<std::mutex> lock(mutex_);
  open_fds_.erase(std::remove(open_fds_.begin(), open_fds_.end(), fd), open_fds_.end());
  ::close(fd);
}

std::string HubServer::answer_hub(int fd, const std::map<std::string, std::string>& headers, const std::string& method,
                                  const std::string& path) {
  const bool body = method == "GET";
  const auto marker = path.find("/resolve/");
  if (marker == std::string::npos || path.empty() || path[0] != '/') {
    return response_head(404, "Not Found", {"Content-Length: 0"});
  }
  const std::string repo_id = path.substr(1, marker - 1);
  const std::string rest = path.substr(marker + 9);
  const auto slash = rest.find('/');
  const std::string revision = url_decode(rest.substr(0, slash));
  const std::string filename = slash == std::string::npos ? "" : url_decode(rest.substr(slash + 1));
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto renamed = renames_.find(repo_id); renamed != renames_.end()) {
    return response_head(307, "Temporary Redirect",
                         {"Location: /" + renamed->second + "/resolve/" + rest, "Content-Length: 0"});
  }
  const auto it = repos_.find(repo_id);
  const auto error = [](int status, const std::string& code, const std::string& message,
                        std::vector<std::string> extra) {
    extra.push_back("X-Error-Code: " + code);
    extra.push_back("X-Error-Message: " + message);
    extra.push_back("Content-Length: 0");
    return response_head(status, status == 401 ? "Unauthorized" : "Not Found", extra);
  };
  if (it == repos_.end()) return error(401, "RepoNotFound", "Repository not found", {});
  const HubServerRepo& repo = it->second;
  const auto auth = headers.find("authorization");
  if (repo.gated && (auth == headers.end() || auth->second != "Bearer " + token())) {
    return error(401, "GatedRepo",
                 "Access to model " + repo_id + " is restricted. You must have access to it and be authenticated.", {});
  }
  if (revision != "main" && revision != repo.commit && repo.tags.count(revision) == 0) {
    return error(404, "RevisionNotFound", "Invalid rev id: " + revision, {});
  }
  const auto file = repo.files.find(filename);
  if (file == repo.files.end()) {
    return error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit: " + repo.commit});
  }
  const std::string& bytes = file->second;
  if (bytes.size() >= repo.lfs_threshold) {
    const std::string sha = sha256(bytes);
    const std::string cdn = "http://localhost:" + std::to_string(cdn_.port) + "/repos/" + sha +
                            "?X-Amz-Signature=local&response-content-disposition=attachment%3B+filename%3D" + filename;
    return response_head(302, "Found",
                         {"Location: " + cdn, "X-Repo-Commit: " + repo.commit, "X-Linked-Etag: " + quoted(sha),
                          "X-Linked-Size: " + std::to_string(bytes.size()),
                          "ETag: " + quoted(git_blob_sha1("version https://git-lfs.github.com/spec/v1\n")),
                          "Content-Length: 0"});
  }
  return content(bytes, body ? range_start(headers) : 0,
                 {"ETag: " + quoted(git_blob_sha1(bytes)), "X-Repo-Commit: " + repo.commit}, body);
}

void HubServer::answer_cdn(int fd, const std::map<std::string, std::string>& headers, const std::string& path) {
  const std::string sha = path.substr(0, path.find('?')).substr(std::string("/repos/").size());
  std::string bytes;
  std::string filename;
  std::uint64_t drop_at = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [id, repo] : repos_) {
      for (const auto& [name, data] : repo.files) {
        if (sha256(data) == sha) {
          bytes = data;
          filename = name;
        }
      }
    }
    if (const auto drop = drops_.find(filename); drop != drops_.end()) {
      drop_at = drop->second;
      drops_.erase(drop);
    }
  }
  if (filename.empty()) return send_all(fd, response_head(404, "Not Found", {"Content-Length: 0"}));
  const std::uint64_t from = range_start(headers);
  const std::string full = content(bytes, from, {"ETag: " + quoted(sha), "Accept-Ranges: bytes"}, true);
  const std::size_t head_size = full.size() - (from < bytes.size() ? bytes.size() - from : 0);
  std::size_t end = drop_at > 0 ? std::min(full.size(), head_size + drop_at) : full.size();
  const std::uint64_t rate = cdn_rate_;
  const std::size_t chunk = rate > 0 ? std::max<std::size_t>(rate / 20, 1) : end;
  for (std::size_t sent = 0; sent < end && !stopping_; sent += chunk) {
    send_all(fd, full.substr(sent, std::min(chunk, end - sent)));
    if (rate > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void HubServer::add_repo(const std::string& repo_id, HubServerRepo repo) {
  std::lock_guard<std::mutex> lock(mutex_);
  repos_[repo_id] = std::move(repo);
}

HubServerRepo HubServer::folder_repo(const std::filesystem::path& folder, const std::string& commit) {
  HubServerRepo repo;
  repo.commit = commit;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    repo.files[entry.path().filename().string()] =
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return repo;
}

void HubServer::add_rename(const std::string& old_id, const std::string& new_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  renames_[old_id] = new_id;
}

void HubServer::drop_next_transfer(const std::string& filename, std::uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  drops_[filename] = bytes;
}

std::string HubServer::endpoint() const { return "http://127.0.0.1:" + std::to_string(hub_.port); }

std::vector<HubServerRequest> HubServer::requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return requests_;
}

void HubServer::clear_requests() {
  std::lock_guard<std::mutex> lock(mutex_);
  requests_.clear();
}

}  // namespace fitsum::test
