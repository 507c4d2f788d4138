// fitsum_hub_test_server: the test Hub of hub_server.h as a program, for the live comparisons with huggingface_hub
// and transformers (tests/hf/test_hub.py), which download from it with HF_ENDPOINT set to the address it prints.
//   fitsum_hub_test_server --repo ORG/NAME=FOLDER [--commit SHA] [--gated ORG/NAME] [--lfs_threshold BYTES]
// Prints the endpoint (http://127.0.0.1:PORT) on its first line, then serves until its standard input closes.
#include <cstdio>
#include <iostream>
#include <string>

#include "hub_server.h"

int main(int argc, char** argv) {
  fitsum::test::HubServer server;
  std::string commit = "5d4b5b8f1e2a0c7d9e6f3a2b1c0d9e8f7a6b5c4d";
  std::uint64_t threshold = 100 * 1024;
  std::vector<std::pair<std::string, std::string>> repos;
  std::vector<std::string> gated;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--repo") {
      const auto equals = value.find('=');
      repos.emplace_back(value.substr(0, equals), value.substr(equals + 1));
    } else if (flag == "--commit") {
      commit = value;
    } else if (flag == "--gated") {
      gated.push_back(value);
    } else if (flag == "--lfs_threshold") {
      threshold = std::stoull(value);
    } else {
      std::fprintf(stderr, "fitsum_hub_test_server: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  for (const auto& [id, folder] : repos) {
    auto repo = fitsum::test::HubServer::folder_repo(folder, commit);
    repo.lfs_threshold = threshold;
    for (const auto& g : gated) repo.gated = repo.gated || g == id;
    server.add_repo(id, repo);
  }
  std::printf("%s\n", server.endpoint().c_str());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}
