// The Hugging Face cache's names and rules (io/hub_cache.h) against huggingface_hub 0.27's: validate_repo_id,
// repo_folder_name, _normalize_etag, the environment of constants.py and transformers' TRANSFORMERS_CACHE,
// get_token's cleaning, try_to_load_from_cache and the pointer path's containment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

#include "fitsum/io/hub_cache.h"
#include "fitsum/io/hub_download.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::io {
namespace {

using test::temp_dir;

// Sets environment variables for one test and restores them after.
class Environment {
 public:
  Environment() {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      if (value != nullptr) saved_[name] = value;
      ::unsetenv(name);
    }
  }
  ~Environment() {
    for (const char* name : kNames) {
      const auto it = saved_.find(name);
      if (it == saved_.end()) {
        ::unsetenv(name);
      } else {
        ::setenv(name, it->second.c_str(), 1);
      }
    }
  }
  void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

 private:
  static constexpr const char* kNames[] = {
      "HF_HOME",        "XDG_CACHE_HOME", "HF_HUB_CACHE",      "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE",
      "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN",    "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH",
      "HF_ENDPOINT",    "HF_HUB_DISABLE_IMPLICIT_TOKEN", "PYTORCH_TRANSFORMERS_CACHE",
      "PYTORCH_PRETRAINED_BERT_CACHE", "HF_HUB_ETAG_TIMEOUT"};
  std::map<std::string, std::string> saved_;
};

TEST(HubCache, RepoIdsAreValidatedAsHuggingfaceHubDoes) {
  for (const char* good : {"gpt2", "google/pegasus-cnn_dailymail", "facebook/bart-large-cnn", "t5-small",
                           "org_1/model.v2", "a/b"}) {
    EXPECT_TRUE(is_repo_id(good)) << good;
  }
  // Paths and names validate_repo_id refuses: more than one '/', a leading or trailing '-' or '.', "--", "..",
  // ".git", characters outside [A-Za-z0-9_.-], an empty part, a name over 96 characters.
  const std::vector<std::string> bad_names = {"",          "/abs/path",  "./model",     "a/b/c",        "out/ckpt/",
                                              "-org/name", "org/name-",  "org/.name",   "org--x/name",  "org/na..me",
                                              "org/x.git", "org/na me",  "org/",        "/name",        "~/model",
                                              std::string(97, 'a')};
  for (const std::string& bad : bad_names) {
    EXPECT_FALSE(is_repo_id(bad)) << bad;
  }
  EXPECT_TRUE(is_repo_id(std::string(96, 'a')));
}

TEST(HubCache, FolderNamesEtagsAndCommits) {
  EXPECT_EQ(repo_folder_name("google/pegasus-cnn_dailymail"), "models--google--pegasus-cnn_dailymail");
  EXPECT_EQ(repo_folder_name("gpt2"), "models--gpt2");
  EXPECT_EQ(normalize_etag("\"a1b2\""), "a1b2");
  EXPECT_EQ(normalize_etag("W/\"a1b2\""), "a1b2");
  EXPECT_EQ(normalize_etag("abc"), "abc");
  EXPECT_EQ(repo_id_of_snapshot("/c/models--google--pegasus/snapshots/0123"),
            std::optional<std::string>("google/pegasus"));
  EXPECT_EQ(repo_id_of_snapshot("/c/models--gpt2/snapshots/0123/"), std::optional<std::string>("gpt2"));
  EXPECT_EQ(repo_id_of_snapshot("/data/pegasus"), std::nullopt);
  EXPECT_TRUE(is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("main"));
  EXPECT_FALSE(is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
  EXPECT_EQ(hub_file_url("http://h:1", {"org/m", "refs/pr/1"}, "sub dir/a+b.json"),
            "http://h:1/org/m/resolve/refs%2Fpr%2F1/sub%20dir/a%2Bb.json");
}

TEST(HubCache, TheCacheFolderFollowsTransformersThenHuggingfaceHub) {
  Environment env;
  const std::string home = std::getenv("HOME") != nullptr ? std::getenv("HOME") : "";
  EXPECT_EQ(HubSettings::from_environment().cache_dir, fs::path(home) / ".cache" / "huggingface" / "hub");
  env.set("XDG_CACHE_HOME", "/x");
  EXPECT_EQ(HubSettings::from_environment().cache_dir, fs::path("/x/huggingface/hub"));
  env.set("HF_HOME", "~/hf");
  EXPECT_EQ(HubSettings::from_environment().cache_dir, fs::path(home + "/hf") / "hub");
  env.set("HUGGINGFACE_HUB_CACHE", "/old-hub");
  EXPECT_EQ(HubSettings::from_environment().cache_dir, fs::path("/old-hub"));
  env.set("HF_HUB_CACHE", "/hub");
  EXPECT_EQ(HubSettings::from_environment().cache_dir, fs::path("/hub"));
  env.set("TRANSFORMERS_CACHE", "/transformers");  // deprecated, and still first in transformers 4.x
  EXPECT_EQ(HubSettings::from_environment().cache_dir, fs::path("/transformers"));
}

TEST(HubCache, OfflineEndpointAndTimeoutsFromTheEnvironment) {
  Environment env;
  EXPECT_FALSE(HubSettings::from_environment().offline);
  EXPECT_EQ(HubSettings::from_environment().endpoint, "https://huggingface.co");
  env.set("TRANSFORMERS_OFFLINE", "1");
  EXPECT_TRUE(HubSettings::from_environment().offline);
  env.set("HF_HUB_OFFLINE", "0");  // `HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE`: a set HF_HUB_OFFLINE decides
  EXPECT_FALSE(HubSettings::from_environment().offline);
  env.set("HF_HUB_OFFLINE", "yes");
  EXPECT_TRUE(HubSettings::from_environment().offline);
  env.set("HF_ENDPOINT", "http://mirror.example:8080/");
  EXPECT_EQ(HubSettings::from_environment().endpoint, "http://mirror.example:8080");
  env.set("HF_HUB_ETAG_TIMEOUT", "3");
  EXPECT_EQ(HubSettings::from_environment().etag_timeout_s, 3);
  env.set("HF_HUB_ETAG_TIMEOUT", "soon");
  EXPECT_THROW(HubSettings::from_environment(), std::invalid_argument);
}

TEST(HubCache, TheTokenComesFromHfTokenThenTheTokenFile) {
  Environment env;
  const auto dir = temp_dir("hub-token");
  env.set("HF_HOME", dir.string());
  EXPECT_EQ(HubSettings::from_environment().token, "");
  std::ofstream(dir / "token") << "  hf_from_file\r\n";  // huggingface-cli login's file, cleaned as get_token does
  auto s = HubSettings::from_environment();
  EXPECT_EQ(s.token, "hf_from_file");
  EXPECT_EQ(s.token_source, (dir / "token").string());
  env.set("HF_TOKEN_PATH", (dir / "elsewhere").string());
  EXPECT_EQ(HubSettings::from_environment().token, "");
  env.set("HUGGING_FACE_HUB_TOKEN", "hf_old_name");
  EXPECT_EQ(HubSettings::from_environment().token, "hf_old_name");
  env.set("HF_TOKEN", "hf_env\n");
  s = HubSettings::from_environment();
  EXPECT_EQ(s.token, "hf_env");
  EXPECT_EQ(s.token_source, "HF_TOKEN");
  env.set("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1");
  EXPECT_EQ(HubSettings::from_environment().token, "");
}

TEST(HubCache, LookupReadsRefsSnapshotsAndNoExist) {
  const auto cache_dir = temp_dir("hub-lookup");
  const HubRepoCache cache(cache_dir, "org/m");
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  EXPECT_EQ(cache.lookup("main", "config.json").state, CachedFile::State::not_cached);
  fs::create_directories(cache.blob_path("e1").parent_path());
  test::write_bytes(cache.blob_path("e1"), "{}");
  cache.link_blob(cache.blob_path("e1"), cache.pointer_path(commit, "config.json"), false);
  EXPECT_EQ(fs::read_symlink(cache.pointer_path(commit, "config.json")), fs::path("../../blobs/e1"));
  EXPECT_EQ(cache.lookup("main", "config.json").state, CachedFile::State::not_cached);  // no ref yet
  cache.write_ref("main", commit);
  EXPECT_EQ(util::read_file(cache.folder() / "refs" / "main"), commit);  // no newline, as huggingface_hub writes
  const auto found = cache.lookup("main", "config.json");
  EXPECT_EQ(found.state, CachedFile::State::found);
  EXPECT_EQ(found.path, cache.folder() / "snapshots" / commit / "config.json");
  EXPECT_EQ(cache.lookup(commit, "config.json").state, CachedFile::State::found);
  cache.mark_absent(commit, "vocab.json");
  EXPECT_TRUE(fs::is_regular_file(cache.folder() / ".no_exist" / commit / "vocab.json"));
  EXPECT_EQ(cache.lookup("main", "vocab.json").state, CachedFile::State::absent);
  EXPECT_EQ(cache.lookup("main", "merges.txt").state, CachedFile::State::not_cached);
  // A nested name links with one more "..", as _create_symlink's relative path does.
  cache.link_blob(cache.blob_path("e1"), cache.pointer_path(commit, "sub/c.json"), false);
  EXPECT_EQ(fs::read_symlink(cache.pointer_path(commit, "sub/c.json")), fs::path("../../../blobs/e1"));
  EXPECT_EQ(cache.lock_path("e1"), cache_dir / ".locks" / "models--org--m" / "e1.lock");
}

TEST(HubCache, NamesThatLeaveTheSnapshotAreRefused) {
  const HubRepoCache cache(temp_dir("hub-escape"), "org/m");
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  for (const char* name : {"../x", "../../blobs/y", "a/../../x", "/etc/passwd", ""}) {
    EXPECT_THROW(cache.pointer_path(commit, name), std::runtime_error) << name;
  }
  EXPECT_THROW(cache.pointer_path("..", "config.json"), std::runtime_error);
  EXPECT_NO_THROW(cache.pointer_path(commit, "a/../config.json"));
}

}  // namespace
}  // namespace fitsum::io
