// Models named by Hub id (io/hub.h), end to end through the fitsum binary against the local test Hub
// (support/hub_server.h), which serves ../shared/data/pegasus-tiny as google/pegasus-cnn_dailymail: the cache layout
// huggingface_hub writes for the same responses (tests/data/hub/*.tree, made by tests/hf/test_hub.py with the real
// huggingface_hub), resumed downloads, offline mode, the token's destinations, concurrent downloads, a cache laid
// out by another tool, and the README's seed command as written.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "fitsum/util/files.h"
#include "hub_server.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

const char* const kId = "google/pegasus-cnn_dailymail";
const char* const kCommit = "5d4b5b8f1e2a0c7d9e6f3a2b1c0d9e8f7a6b5c4d";  // hub_server_main.cpp's default too

fs::path model_folder() { return shared_dir() / "data" / "pegasus-tiny"; }
std::string read(const fs::path& path) { return util::read_file(path); }
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The cache as text, one line per entry, sorted: "dir/", "link -> target", "file <size> <sha256[:12]>" (the
// format of tests/hf/test_hub.py's cache_tree).
std::string cache_tree(const fs::path& root) {
  std::vector<std::string> lines;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string rel = it->path().lexically_relative(root).generic_string();
    if (it->is_symlink()) {
      lines.push_back(rel + " -> " + fs::read_symlink(it->path()).generic_string());
    } else if (it->is_directory()) {
      lines.push_back(rel + "/");
    } else {
      const std::string bytes = read(it->path());
      lines.push_back(rel + " " + std::to_string(bytes.size()) + " " + HubServer::sha256(bytes).substr(0, 12));
    }
  }
  std::sort(lines.begin(), lines.end());
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  return text;
}

// The line of `output` that is fitsum's error, "" when there is none.
std::string error_line(const std::string& output) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("fitsum: error:", 0) == 0) return line;
  }
  return "";
}

class Hub : public ::testing::Test {
 protected:
  void SetUp() override {
    FITSUM_REQUIRE_SHARED();
    server_.add_repo(kId, HubServer::folder_repo(model_folder(), kCommit));
    home_ = temp_dir(std::string("hub-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  // A clean Hugging Face environment: HF_HOME in the test's folder, the test Hub as HF_ENDPOINT.
  std::string env(const std::string& extra = "") const {
    return "env -u HF_TOKEN -u HUGGING_FACE_HUB_TOKEN -u HF_HUB_CACHE -u HUGGINGFACE_HUB_CACHE -u TRANSFORMERS_CACHE "
           "-u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE -u HF_TOKEN_PATH HF_HOME='" +
           home_.string() + "' HF_ENDPOINT=" + server_.endpoint() + " " + extra + " " + fitsum_binary().string() +
           " ";
  }
  fs::path cache() const { return home_ / "hub"; }
  fs::path repo_cache() const { return cache() / "models--google--pegasus-cnn_dailymail"; }
  fs::path snapshot() const { return repo_cache() / "snapshots" / kCommit; }
  std::size_t gets_of(const std::string& listener, const std::string& part) const {
    const auto all = server_.requests();
    return std::count_if(all.begin(), all.end(), [&](const HubServerRequest& r) {
      return r.listener == listener && r.method == "GET" && contains(r.path, part);
    });
  }

  HubServer server_;
  fs::path home_;
};

TEST_F(Hub, DownloadWritesTheLayoutHuggingfaceHubWrites) {
  const auto r = run_command(env() + "download " + kId);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, snapshot().string())) << r.output;  // the folder is printed
  EXPECT_EQ(cache_tree(cache()), read(source_dir() / "tests" / "data" / "hub" / "pegasus-tiny-download.tree"));
  for (const char* file : {"config.json", "model.safetensors", "spiece.model", "tokenizer.json"}) {
    EXPECT_EQ(read(snapshot() / file), read(model_folder() / file)) << file;
  }
  // Every file came once: a second run asks for metadata only.
  server_.clear_requests();
  ASSERT_EQ(run_command(env() + "download " + kId).exit_code, 0);
  EXPECT_EQ(gets_of("hub", "/"), 0u);
  EXPECT_EQ(gets_of("cdn", "/"), 0u);
}

TEST_F(Hub, TrainsFromAHubIdAndKeepsItAsTheBaseModel) {
  const auto out = home_ / "out";
  const auto data = write_copy_task_records(home_ / "records.jsonl");
  const auto r = run_command(env() + "train --model_name_or_path " + kId + " --train_file '" + data.string() +
                             "' --output_dir '" + out.string() + "' --max_steps 1 --per_device_train_batch_size 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, std::string("pretrained weights from ") + kId + " (" + snapshot().string()))
      << r.output;
  EXPECT_TRUE(contains(read(out / "README.md"), std::string("base_model: ") + kId)) << read(out / "README.md");
  // The snapshot's generation_config.json travels with the saved model, as it does from a local folder.
  EXPECT_EQ(read(out / "generation_config.json"), read(model_folder() / "generation_config.json"));
  EXPECT_TRUE(fs::is_regular_file(out / "spiece.model"));
}

TEST_F(Hub, ADroppedConnectionIsResumedWithARangeRequest) {
  const std::string model = read(model_folder() / "model.safetensors");
  server_.drop_next_transfer("model.safetensors", 1000000);
  const auto r = run_command(env() + "download " + kId);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read(snapshot() / "model.safetensors"), model);
  std::vector<std::string> ranges;
  for (const auto& q : server_.requests()) {
    if (q.listener == "cdn" && contains(q.path, HubServer::sha256(model))) ranges.push_back(q.range);
  }
  EXPECT_EQ(ranges, (std::vector<std::string>{"", "bytes=1000000-"}));
  EXPECT_FALSE(fs::exists(repo_cache() / "blobs" / (HubServer::sha256(model) + ".incomplete")));
}

TEST_F(Hub, AnIncompleteFileFromAnEarlierRunIsResumed) {
  const std::string model = read(model_folder() / "model.safetensors");
  const auto blob = repo_cache() / "blobs" / HubServer::sha256(model);
  fs::create_directories(blob.parent_path());
  write_bytes(blob.string() + ".incomplete", model.substr(0, 777777));  // a run killed mid-download
  const auto r = run_command(env() + "download " + kId);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read(blob), model);
  for (const auto& q : server_.requests()) {
    if (q.listener == "cdn" && contains(q.path, HubServer::sha256(model))) EXPECT_EQ(q.range, "bytes=777777-");
  }
  EXPECT_EQ(gets_of("cdn", HubServer::sha256(model)), 1u);
}

TEST_F(Hub, OfflineModeUsesTheCacheAndNamesWhatIsMissing) {
  for (const char* variable : {"HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1"}) {
    const auto r = run_command(env(variable) + "info --model " + kId);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    const auto error = error_line(r.output);
    EXPECT_TRUE(contains(error, kId) && contains(error, "config.json") && contains(error, "offline mode") &&
                contains(error, "fitsum download " + std::string(kId)))
        << r.output;
  }
  EXPECT_TRUE(server_.requests().empty());
  ASSERT_EQ(run_command(env() + "download " + kId).exit_code, 0);
  server_.clear_requests();
  const auto data = write_copy_task_records(home_ / "records.jsonl");
  const auto r = run_command(env("HF_HUB_OFFLINE=1") + "train --model_name_or_path " + kId + " --train_file '" +
                             data.string() + "' --output_dir '" + (home_ / "out").string() + "' --max_steps 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(server_.requests().empty());  // not one request
}

TEST_F(Hub, TheTokenGoesToTheHubsHostOnly) {
  auto repo = HubServer::folder_repo(model_folder(), kCommit);
  repo.gated = true;
  server_.add_repo("org/gated", repo);
  auto r = run_command(env() + "download org/gated");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto error = error_line(r.output);
  EXPECT_TRUE(contains(error, "org/gated is a gated model") && contains(error, "huggingface-cli login") &&
              contains(error, "HF_TOKEN") && contains(error, "no token was sent"))
      << r.output;
  // Logged in with huggingface-cli login: the token file under HF_HOME.
  write_bytes(home_ / "token", HubServer::token() + "\n");
  server_.clear_requests();
  r = run_command(env() + "download org/gated");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::size_t hub_requests = 0;
  std::size_t cdn_requests = 0;
  for (const auto& q : server_.requests()) {
    if (q.listener == "hub") {
      ++hub_requests;
      EXPECT_EQ(q.authorization, "Bearer " + HubServer::token()) << q.path;
    } else {
      ++cdn_requests;
      EXPECT_EQ(q.authorization, "") << q.path;  // a CDN on another host never sees it
    }
  }
  EXPECT_GT(hub_requests, 0u);
  EXPECT_GE(cdn_requests, 3u);  // model.safetensors, spiece.model, tokenizer.json
}

TEST_F(Hub, TwoConcurrentDownloadsTransferEachFileOnce) {
  server_.set_cdn_rate(4 << 20);  // 2.4 MB of weights take about 0.6 s: the two runs overlap
  const auto r = run_command("(" + env() + "download " + kId + " > '" + (home_ / "a.log").string() + "' 2>&1 & " +
                             env() + "download " + kId + " > '" + (home_ / "b.log").string() + "' 2>&1; " +
                             "b=$?; wait $!; a=$?; exit $((a + b)))");
  ASSERT_EQ(r.exit_code, 0) << read(home_ / "a.log") << read(home_ / "b.log");
  for (const char* file : {"model.safetensors", "tokenizer.json", "spiece.model"}) {
    const std::string bytes = read(model_folder() / file);
    EXPECT_EQ(gets_of("cdn", HubServer::sha256(bytes)), 1u) << file;
    EXPECT_EQ(read(snapshot() / file), bytes) << file;
  }
  EXPECT_EQ(cache_tree(cache()), read(source_dir() / "tests" / "data" / "hub" / "pegasus-tiny-download.tree"));
}

TEST_F(Hub, ACacheLaidOutByHuggingfaceHubIsUsedAsItIs) {
  // Written here as huggingface_hub writes it, with no fitsum code: blobs named by their ETags, relative links,
  // refs/main; found through TRANSFORMERS_CACHE, as transformers finds it.
  const auto cache_dir = home_ / "transformers-cache";
  const auto repo = cache_dir / "models--google--pegasus-cnn_dailymail";
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots" / kCommit);
  write_bytes(repo / "refs" / "main", kCommit);
  for (const char* file : {"config.json", "generation_config.json", "model.safetensors", "spiece.model",
                           "tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string bytes = read(model_folder() / file);
    const std::string etag = bytes.size() >= 100 * 1024 ? HubServer::sha256(bytes) : HubServer::git_blob_sha1(bytes);
    write_bytes(repo / "blobs" / etag, bytes);
    fs::create_symlink(fs::path("../../blobs") / etag, repo / "snapshots" / kCommit / file);
  }
  const auto before = cache_tree(cache_dir);
  const auto data = write_copy_task_records(home_ / "records.jsonl");
  const std::string offline = "HF_HUB_OFFLINE=1 TRANSFORMERS_CACHE='" + cache_dir.string() + "'";
  auto r = run_command(env(offline) + "train --model_name_or_path " + kId + " --train_file '" + data.string() +
                       "' --output_dir '" + (home_ / "out").string() + "' --max_steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, (repo / "snapshots" / kCommit).string())) << r.output;
  r = run_command(env("HF_HUB_OFFLINE=1") + "summarize --model " + kId + " --revision " + kCommit +
                  " --cache_dir '" + cache_dir.string() + "' < /dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(cache_tree(cache_dir), before);  // read, never written
  EXPECT_TRUE(server_.requests().empty());
}

TEST_F(Hub, ALocalFolderOfTheSameNameWins) {
  const auto work = home_ / "work";
  fs::create_directories(work / "google");
  fs::create_directory_symlink(model_folder(), work / kId);
  const auto r = run_command("cd '" + work.string() + "' && " + env("HF_HUB_OFFLINE=1") + "info --model " + kId);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(cache()));
}

TEST_F(Hub, UnknownNamesRevisionsAndUnreachableHubsAreOneLineErrors) {
  auto r = run_command(env() + "info --model google/no-such-model");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(error_line(r.output), "'google/no-such-model' is neither a local folder nor a model on the Hub"))
      << r.output;
  r = run_command(env() + "info --model " + kId + " --revision v9");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(error_line(r.output), "revision 'v9' is not a branch, tag or commit of " + std::string(kId)))
      << r.output;
  // A Hub that does not answer (a closed port): the name, the file and the reason.
  r = run_command("env -u HF_HUB_OFFLINE HF_HOME='" + home_.string() + "' HF_ENDPOINT=http://127.0.0.1:9 " +
                  fitsum_binary().string() + " info --model " + kId);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(error_line(r.output), "cannot be reached") && contains(error_line(r.output), "config.json"))
      << r.output;
  // A renamed repository: the relative redirect is followed, the cache keeps the name asked for.
  server_.add_rename("google/old-name", kId);
  r = run_command(env() + "info --model google/old-name");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_directory(cache() / "models--google--old-name" / "snapshots" / kCommit));
}

// The README's seed command, as written there, against the test Hub's copy of a small model (and the first records
// of the data it names).
std::vector<std::string> readme_seed_command() {
  std::istringstream readme(read(source_dir() / "README.md"));
  std::string command;
  bool inside = false;
  for (std::string line; std::getline(readme, line);) {
    if (!inside) {
      const auto at = line.find("fitsum train --model_name_or_path google/pegasus-cnn_dailymail ");
      if (at == std::string::npos) continue;
      inside = true;
      const auto space = at == 0 ? std::string::npos : line.rfind(' ', at - 1);  // "build/fitsum", "$ fitsum"
      line = line.substr(space == std::string::npos ? 0 : space + 1);
    }
    const bool more = !line.empty() && line.back() == '\\';
    command += (more ? line.substr(0, line.size() - 1) : line) + " ";
    if (!more) break;
  }
  std::istringstream words(command);
  std::vector<std::string> args;
  for (std::string word; words >> word;) args.push_back(word);
  return args;
}

TEST_F(Hub, TheReadmeSeedCommandRunsAsWritten) {
  auto args = readme_seed_command();
  ASSERT_GT(args.size(), 3u) << "README.md has no `fitsum train --model_name_or_path google/pegasus-cnn_dailymail` "
                                "command";
  args[0] = fitsum_binary().string();  // build/fitsum, or fitsum on the PATH
  // The data files it names, cut to their first records: the command, not the data, is under test.
  const auto work = home_ / "work";
  fs::create_directories(work / "data" / "samsum");
  for (const char* split : {"train", "validation", "test"}) {
    std::ifstream in(source_dir() / "data" / "samsum" / (std::string(split) + ".jsonl"));
    std::ofstream out(work / "data" / "samsum" / (std::string(split) + ".jsonl"));
    std::string line;
    for (int i = 0; i < 12 && std::getline(in, line); ++i) out << line << "\n";
  }
  std::string line = "cd '" + work.string() + "' && " + env();
  for (std::size_t i = 1; i < args.size(); ++i) line += "'" + args[i] + "' ";
  const auto r = run_command(line);
  ASSERT_EQ(r.exit_code, 0) << line << "\n" << r.output;
  EXPECT_TRUE(contains(r.output, "done:")) << r.output;
  const auto output_dir = std::find(args.begin(), args.end(), "--output_dir");
  ASSERT_NE(output_dir, args.end());
  EXPECT_TRUE(fs::is_regular_file(work / *(output_dir + 1) / "model.safetensors"));
  EXPECT_TRUE(fs::is_directory(snapshot()));
}

}  // namespace
}  // namespace fitsum::test
