// `fitsum merge --model BASE --adapter A --output_dir M`: the LoRA adapter A merged into its base model and saved as a
// full Hugging Face model folder (train/merge_adapter.h), as PEFT's merge_and_unload followed by save_pretrained.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "fitsum/train/merge_adapter.h"
#include "hub_flags.h"

namespace fitsum::cli {

namespace {

struct MergeArgs {
  io::ModelSource model;  // model_name_or_path, adapter_name_or_path, revision, cache_dir, token
  std::string output_dir;
  bool overwrite_output_dir = false;
};

void run_merge(MergeArgs a) {
  train::MergeRequest request;
  request.model = io::resolve_model_source(a.model, download_progress());  // a Hub id's files
  request.output_dir = a.output_dir;
  request.overwrite_output_dir = a.overwrite_output_dir;
  const auto result = train::merge_adapter(request);
  std::fprintf(stderr, "fitsum merge\n  model        %s\n  merged       %lld adapted layers\n",
               result.description.c_str(), static_cast<long long>(result.layers_merged));
  std::printf("%s\n", result.output_dir.c_str());
}

}  // namespace

void add_merge_command(CLI::App& app) {
  auto a = std::make_shared<MergeArgs>();
  auto* cmd = app.add_subcommand("merge",
                                 "Merge a LoRA adapter into its base model (PEFT's merge_and_unload) and save the "
                                 "full model folder");
  cmd->add_option("--model,--model_name_or_path", a->model.model_name_or_path,
                  "the base model: Hugging Face model folder, or Hub id (org/name)")
      ->required();
  cmd->add_option("--adapter,--adapter_name_or_path", a->model.adapter_name_or_path,
                  "the LoRA adapter folder (PEFT's save_pretrained, or a fitsum LoRA run or checkpoint)")
      ->required();
  cmd->add_option("--output_dir", a->output_dir, "where the merged model folder is written")->required();
  cmd->add_flag("--overwrite_output_dir", a->overwrite_output_dir,
                "replace the model files of an output_dir that holds a model");
  add_hub_flags(*cmd, a->model);
  cmd->callback([a]() { run_merge(*a); });
}

}  // namespace fitsum::cli
