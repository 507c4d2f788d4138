// `fitsum download org/name [--revision R] [--cache_dir D]`: fetches a model's files (config, generation config,
// weights, tokenizer) into the Hugging Face cache for later offline use, as `huggingface-cli download` would lay
// them out, and prints its snapshot folder (io/hub.h).
#include <cstdio>
#include <memory>

#include "commands.h"
#include "hub_flags.h"

namespace fitsum::cli {

namespace {

struct DownloadArgs {
  std::string repo_id;
  io::ModelSource hub;  // revision, cache_dir, token
};

void run_download(const DownloadArgs& a) {
  const auto folder = io::download_model(a.repo_id, hub_options(a.hub));
  std::printf("%s\n", folder.c_str());
}

}  // namespace

void add_download_command(CLI::App& app) {
  auto a = std::make_shared<DownloadArgs>();
  auto* cmd = app.add_subcommand("download",
                                 "Download a model from the Hugging Face Hub into its cache (for offline use) and "
                                 "print its folder");
  cmd->add_option("repo_id", a->repo_id, "the model's Hub id, org/name")->required();
  add_hub_flags(*cmd, a->hub);
  cmd->callback([a]() { run_download(*a); });
}

}  // namespace fitsum::cli
