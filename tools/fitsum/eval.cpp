// `fitsum eval`: loss, generation and ROUGE of a model on a dataset, as Seq2SeqTrainer.evaluate with
// predict_with_generate and run_summarization's compute_metrics report them; optionally writes every prediction
// and the metrics to files.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "commands.h"
#include "data_flags.h"
#include "fitsum/eval/rouge.h"
#include "fitsum/families/family.h"
#include "fitsum/generate/options.h"
#include "fitsum/io/model_loader.h"
#include "fitsum/tokenizer/tokenizer.h"
#include "fitsum/train/evaluation.h"
#include "fitsum/train/model_lengths.h"
#include "fitsum/util/files.h"
#include "fitsum/util/output_paths.h"
#include "generation_flags.h"
#include "hub_flags.h"
#include "progress.h"
#include "runtime_flags.h"

namespace fitsum::cli {

namespace {

namespace fs = std::filesystem;

struct EvalArgs {
  std::string model_dir;
  std::string tokenizer_name;
  io::ModelSource hub;  // --revision, --cache_dir, --token of a Hub id
  std::string test_file;
  std::string predictions_file;
  std::string metrics_file;
  std::int64_t batch_size = 8;
  bool use_stemmer = true;
  bool rouge_split_sentences = false;
  bool bf16 = false;
  bool no_loss = false;
  bool disable_tqdm = false;
  data::DataOptions data;
  GenerationFlags generation;
  util::RuntimeOptions runtime;
};

void run_eval(EvalArgs a) {
  validate_evaluation_flags(a.batch_size, a.data, a.generation);
  // Where the results go must take them, checked before the model loads and the evaluation runs.
  util::require_output_files({{"--predictions_file", a.predictions_file}, {"--metrics_file", a.metrics_file}},
                             {{"--test_file", a.test_file}});
  const auto runtime = start_runtime(a.runtime);
  io::ModelSource source = a.hub;
  source.model_name_or_path = a.model_dir;
  source.tokenizer_name = a.tokenizer_name;
  source = io::resolve_model_source(source, download_progress());  // a Hub id's files, from the cache or the Hub
  a.model_dir = source.model_name_or_path;
  auto loaded = io::load_model(source, 0);
  auto& model = *loaded.model;
  model.to(runtime.device);
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  if (!loaded.tokenizer_dir.empty()) tokenizer = families::load_tokenizer(loaded.tokenizer_dir);
  const tokenizer::Tokenizer* tok = tokenizer.get();
  train::fit_lengths_to_model(a.data, model.config(), tok, print_warning);

  train::EvaluationOptions options;
  options.batch_size = a.batch_size;
  options.compute_loss = !a.no_loss;
  options.generation = train::model_generation_defaults(loaded.config_json, a.model_dir, a.model_dir);
  a.generation.apply(options.generation);
  for (const auto& warning : train::check_generation_for_model(options.generation, model.config())) {
    print_warning(warning);
  }
  options.rouge.use_stemmer = a.use_stemmer;
  options.rouge.split_sentences = a.rouge_split_sentences;
  options.bf16 = a.bf16;
  options.collator.pad_token_id = model.config().pad_token_id;

  data::ReadStats stats;
  const auto examples =
      data::read_examples(a.test_file, tok, model.config().vocab_size, a.data, a.data.max_eval_samples, &stats);
  train::check_evaluation_examples(examples, a.test_file, "test_file", model.config().vocab_size, tok,
                                   /*decoded=*/tok != nullptr);
  std::fprintf(stderr, "fitsum eval\n  model        %s\n  test_file    %s: %s\n  generation   %s\n",
               loaded.description.c_str(), a.test_file.c_str(), stats.summary(a.data).c_str(),
               generate::to_json(options.generation).dump().c_str());
  std::fprintf(stderr, "  rouge        use_stemmer=%s split_sentences=%s, exact means\n",
               a.use_stemmer ? "true" : "false", a.rouge_split_sentences ? "true" : "false");

  ProgressLine progress(!a.disable_tqdm);
  options.on_progress = [&progress](const char* phase, std::size_t done, std::size_t total) {
    if (done == 1) progress.start(std::string("eval (") + phase + ")", static_cast<std::int64_t>(total));
    progress.show(static_cast<std::int64_t>(done), "", done == 1);
  };
  const auto result = train::evaluate_model(model, examples, tok, options, runtime.device);
  progress.clear();

  auto metrics = train::evaluation_metrics(result, /*generated=*/true);
  metrics["eval_samples"] = examples.size();
  std::printf("%s\n", metrics.dump(2).c_str());

  if (!a.predictions_file.empty()) {
    std::string out;
    for (const auto& p : result.predictions) {
      nlohmann::ordered_json record;
      if (!examples[p.index].id.is_null()) record["id"] = examples[p.index].id;
      if (tok != nullptr) record["summary"] = p.summary;
      if (tok != nullptr && examples[p.index].labels) record["reference"] = p.reference;
      record["generated_ids"] = p.generated_ids;
      out += record.dump() + "\n";
    }
    util::write_file_atomic(a.predictions_file, out);
  }
  if (!a.metrics_file.empty()) util::write_file_atomic(a.metrics_file, metrics.dump(2) + "\n");
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval", "Evaluate a model on a dataset: loss, generated summaries, ROUGE");
  cmd->add_option("--model,--model_name_or_path", a->model_dir, "Hugging Face model folder, or Hub id (org/name)")
      ->required();
  add_hub_flags(*cmd, a->hub);
  cmd->add_option("--adapter_name_or_path", a->hub.adapter_name_or_path,
                  "a LoRA adapter folder (PEFT's save_pretrained or a fitsum LoRA run) added to the model, which is "
                  "its base");
  add_tokenizer_name_flag(*cmd, a->tokenizer_name);
  cmd->add_option("--test_file", a->test_file, "jsonl, json or csv; text or pre-tokenized")->required();
  cmd->add_option("--per_device_eval_batch_size", a->batch_size, "sources per generation batch")->capture_default_str();
  cmd->add_option("--predictions_file", a->predictions_file,
                  "write {id, summary, reference, generated_ids} per record");
  cmd->add_option("--metrics_file", a->metrics_file, "write the metrics as JSON");
  cmd->add_option("--use_stemmer", a->use_stemmer, "ROUGE with the Porter stemmer (run_summarization: true)")
      ->capture_default_str();
  cmd->add_flag("--rouge_split_sentences", a->rouge_split_sentences,
                "newlines between sentences before rougeLsum, as run_summarization does");
  cmd->add_flag("--bf16", a->bf16, "bfloat16 autocast");
  cmd->add_flag("--no_loss", a->no_loss, "skip the loss pass");
  cmd->add_flag("--disable_tqdm", a->disable_tqdm, "no progress on stderr");
  add_tokenization_flags(*cmd, a->data);
  add_sample_limit_flags(*cmd, a->data);
  add_generation_flags(*cmd, a->generation);
  add_runtime_flags(*cmd, a->runtime);
  cmd->callback([a]() { run_eval(*a); });
}

}  // namespace fitsum::cli
