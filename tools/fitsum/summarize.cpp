// `fitsum summarize`: one summary per input, from a dataset file (jsonl/json/csv, the text column) or from plain
// text on stdin, where a blank line separates dialogues. Summaries go to stdout, one per line, in input order.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <torch/torch.h>

#include "commands.h"
#include "data_flags.h"
#include "fitsum/io/model_loader.h"
#include "fitsum/tokenizer/tokenizer.h"
#include "fitsum/train/evaluation.h"
#include "generation_flags.h"
#include "runtime_flags.h"

namespace fitsum::cli {

namespace {

struct SummarizeArgs {
  std::string model_dir;
  std::string tokenizer_name;
  std::string input_file;
  std::int64_t batch_size = 8;
  data::DataOptions data;
  GenerationFlags generation;
  util::RuntimeOptions runtime;
};

// Text kept of one stdin dialogue: the encoder needs only the start of it (max_source_length ids), so the rest of a
// dialogue longer than this is read past, not held.
constexpr std::size_t kMaxDialogueBytes = std::size_t{16} << 20;

// Dialogues on stdin (blocks of lines separated by blank lines), each encoded as soon as it ends: what is held is
// token ids, at most max_source_length per dialogue, and one dialogue's first kMaxDialogueBytes. Each is encoded with
// the source prefix before it, as file records are.
std::vector<data::Example> read_stdin_examples(const tokenizer::Tokenizer& tokenizer,
                                               const data::DataOptions& options) {
  const auto max_length = static_cast<std::size_t>(options.max_source_length);
  std::vector<data::Example> examples;
  std::string line, current;
  const auto flush = [&]() {
    if (current.empty()) return;
    data::Example e;
    e.input_ids = tokenizer.encode(options.source_prefix + current, max_length);
    examples.push_back(std::move(e));
    current.clear();
  };
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      flush();
    } else if (current.size() < kMaxDialogueBytes) {
      if (!current.empty()) current += '\n';
      current.append(line, 0, kMaxDialogueBytes - std::min(kMaxDialogueBytes, current.size()));
    }
  }
  flush();
  return examples;
}

void run_summarize(SummarizeArgs a) {
  const auto runtime = start_runtime(a.runtime);
  io::ModelSource source;
  source.model_name_or_path = a.model_dir;
  source.tokenizer_name = a.tokenizer_name;
  auto loaded = io::load_model(source, 0);
  auto& model = *loaded.model;
  model.to(runtime.device);
  if (loaded.tokenizer_dir.empty()) {
    throw std::invalid_argument("'" + a.model_dir + "' has no " + tokenizer::kTokenizerFiles +
                                ": pass --tokenizer_name DIR");
  }
  const auto tokenizer_owner = tokenizer::load_tokenizer(loaded.tokenizer_dir);
  const tokenizer::Tokenizer& tokenizer = *tokenizer_owner;
  for (const auto& warning : data::clamp_lengths_to_model(a.data, model.config().max_position_embeddings)) {
    std::cerr << "fitsum: warning: " << warning << "\n";
  }
  if (const auto warning = data::missing_source_prefix_warning(model.config().model_type, a.data); !warning.empty()) {
    std::cerr << "fitsum: warning: " << warning << "\n";
  }
  a.data.validate();

  std::vector<data::Example> examples;
  if (!a.input_file.empty()) {
    examples = data::read_examples(a.input_file, tokenizer, a.data);
    for (auto& e : examples) e.labels.reset();  // summaries only
  } else {
    examples = read_stdin_examples(tokenizer, a.data);
  }
  train::EvaluationOptions options;
  options.batch_size = a.batch_size;
  options.compute_loss = false;
  options.generation = generate::load_generation_options(a.model_dir);
  a.generation.apply(options.generation);
  options.generation.validate_for(model.config());
  for (const auto& warning : options.generation.warnings()) std::cerr << "fitsum: warning: " << warning << "\n";
  options.collator.pad_token_id = model.config().pad_token_id;
  const auto result = train::evaluate_model(model, examples, &tokenizer, options, runtime.device);
  for (const auto& p : result.predictions) {
    std::string line = p.summary;
    for (auto& c : line) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    std::printf("%s\n", line.c_str());
  }
  std::fprintf(stderr, "fitsum: %zu summaries in %.2f s\n", result.predictions.size(), result.runtime_seconds);
}

}  // namespace

void add_summarize_command(CLI::App& app) {
  auto a = std::make_shared<SummarizeArgs>();
  auto* cmd = app.add_subcommand("summarize",
                                 "Print one summary per input: a dataset file, or dialogues on stdin separated by "
                                 "blank lines");
  cmd->add_option("--model,--model_name_or_path", a->model_dir, "Hugging Face model folder")->required();
  add_tokenizer_name_flag(*cmd, a->tokenizer_name);
  cmd->add_option("--input_file", a->input_file, "jsonl, json or csv (default: plain text on stdin)");
  cmd->add_option("--per_device_eval_batch_size", a->batch_size, "sources per batch")->capture_default_str();
  add_tokenization_flags(*cmd, a->data);
  add_generation_flags(*cmd, a->generation);
  add_runtime_flags(*cmd, a->runtime);
  cmd->callback([a]() { run_summarize(*a); });
}

}  // namespace fitsum::cli
