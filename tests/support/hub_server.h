// A local stand-in for the Hugging Face Hub, for tests that must not reach the network: two HTTP/1.1 listeners on
// 127.0.0.1 that speak what huggingface_hub's hf_hub_download relies on.
// - The Hub (endpoint(), for HF_ENDPOINT): HEAD and GET /{repo_id}/resolve/{revision}/{filename}. A small file is
//   answered there (200, ETag "<git blob sha1>", X-Repo-Commit, Content-Length, Range honoured); a large ("LFS")
//   file is a 302 to the CDN with X-Linked-Etag "<sha256>", X-Linked-Size and X-Repo-Commit. Errors carry the Hub's
//   X-Error-Code: 401 RepoNotFound (unknown repository), 401 GatedRepo (a gated one without the right token), 404
//   RevisionNotFound, 404 EntryNotFound (with X-Repo-Commit). A renamed repository answers 307 with a relative
//   Location.
// - The CDN, on another port and named by another host ("localhost"), as signed CloudFront URLs are: GET
//   /repos/<sha256>?X-Amz-Signature=..., with Range requests (206), optionally paced, and optionally closing the
//   connection part-way through the next transfer of a file (a dropped download).
// Every request is recorded (which listener, method, path, Authorization and Range headers) for the tests to check.
// Each response closes its connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fitsum::test {

struct HubServerRepo {
  std::string commit;                         // 40 hexadecimal digits
  std::map<std::string, std::string> files;   // file name -> bytes
  std::set<std::string> tags;                 // revisions besides "main" and the commit that name it
  bool gated = false;                         // readable only with HubServer::token()
  std::uint64_t lfs_threshold = 100 * 1024;   // files at least this large are served through the CDN
};

struct HubServerRequest {
  std::string listener;       // "hub" or "cdn"
  std::string method;         // "HEAD", "GET"
  std::string path;           // as sent, query included
  std::string authorization;  // the Authorization header, "" when none was sent
  std::string range;          // the Range header, "" when none was sent
};

class HubServer {
 public:
  HubServer();
  ~HubServer();
  HubServer(const HubServer&) = delete;
  HubServer& operator=(const HubServer&) = delete;

  // The repository `repo_id` serves `repo`; a folder's regular files become its files (add_folder).
  void add_repo(const std::string& repo_id, HubServerRepo repo);
  static HubServerRepo folder_repo(const std::filesystem::path& folder, const std::string& commit);
  // `old_id` was renamed `new_id`: its resolve URLs answer 307 with a relative Location.
  void add_rename(const std::string& old_id, const std::string& new_id);
  // The next CDN transfer of `filename` (in any repository) stops after `bytes` bytes of its body.
  void drop_next_transfer(const std::string& filename, std::uint64_t bytes);
  // The CDN sends at most `bytes_per_second` (0: as fast as it can).
  void set_cdn_rate(std::uint64_t bytes_per_second) { cdn_rate_ = bytes_per_second; }

  std::string endpoint() const;  // http://127.0.0.1:<port>
  static std::string token() { return "hf_test_token_of_the_local_hub"; }
  std::vector<HubServerRequest> requests() const;
  void clear_requests();

  // The blob names huggingface_hub gives the file: git's blob sha1 for a small file, sha256 for an LFS one.
  static std::string git_blob_sha1(const std::string& bytes);
  static std::string sha256(const std::string& bytes);

 private:
  struct Listener {
    int fd = -1;
    int port = 0;
    std::thread thread;
  };
  void start(Listener& listener, const std::string& name);
  void serve(int fd, const std::string& name);
  std::string answer_hub(int fd, const std::map<std::string, std::string>& headers, const std::string& method,
                         const std::string& path);
  void answer_cdn(int fd, const std::map<std::string, std::string>& headers, const std::string& path);

  mutable std::mutex mutex_;
  std::map<std::string, HubServerRepo> repos_;
  std::map<std::string, std::string> renames_;
  std::map<std::string, std::uint64_t> drops_;  // file name -> bytes before the connection is closed
  std::vector<HubServerRequest> requests_;
  std::vector<std::thread> connections_;
  std::vector<int> open_fds_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> cdn_rate_{0};
  Listener hub_;
  Listener cdn_;
};

}  // namespace fitsum::test
