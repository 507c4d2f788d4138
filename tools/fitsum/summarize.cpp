// `fitsum summarize`: one summary per input, from a dataset file (jsonl/json/csv, the text column) or from plain
// text on stdin, where a blank line separates dialogues. Summaries go to stdout, one per line, in input order, each
// batch's as soon as it is generated; from stdin a batch is what has arrived (at most per_device_eval_batch_size
// dialogues), so a dialogue followed by a blank line is summarized while stdin stays open.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <iostream>
#include <mutex>
#include <thread>

#include <torch/torch.h>

#include "commands.h"
#include "data_flags.h"
#include "fitsum/families/family.h"
#include "fitsum/io/model_loader.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/tokenizer/tokenizer.h"
#include "fitsum/train/evaluation.h"
#include "fitsum/train/model_lengths.h"
#include "generation_flags.h"
#include "hub_flags.h"
#include "runtime_flags.h"

namespace fitsum::cli {

namespace {

struct SummarizeArgs {
  std::string model_dir;
  std::string tokenizer_name;
  io::ModelSource hub;  // --revision, --cache_dir, --token of a Hub id
  std::string input_file;
  std::int64_t batch_size = 8;
  data::DataOptions data;
  GenerationFlags generation;
  util::RuntimeOptions runtime;
};

// Text kept of one stdin dialogue: the encoder needs only the start of it (max_source_length ids), so the rest of a
// dialogue longer than this is read past, not held.
constexpr std::size_t kMaxDialogueBytes = std::size_t{16} << 20;

// Dialogues read from stdin on a thread of their own, handed to the summarizing thread as soon as each one ends (at a
// blank line or the end of input): what is held is token ids, at most max_source_length per dialogue, at most
// `capacity` dialogues waiting (the reader waits while the model is busy), and one dialogue's first
// kMaxDialogueBytes of text. Each is encoded with the source prefix before it, as file records are.
class StdinDialogues {
 public:
  StdinDialogues(std::shared_ptr<const tokenizer::Tokenizer> tokenizer, const data::DataOptions& options,
                 std::size_t capacity)
      : queue_(std::make_shared<Queue>()) {
    queue_->capacity = capacity;
    // Detached: the reader ends only at the end of stdin, and a command that stops early (an error) must not wait
    // for it. It owns what it uses (the queue, the tokenizer, the options), so it may outlive this object.
    std::thread([queue = queue_, tokenizer = std::move(tokenizer), options] {
      read_all(*queue, *tokenizer, options);
    }).detach();
  }

  // Waits for at least one dialogue and takes up to `max` of those that have arrived, without waiting for more;
  // empty at the end of input. Rethrows what stopped the reader.
  std::vector<data::Example> take(std::size_t max) {
    std::unique_lock<std::mutex> lock(queue_->mutex);
    queue_->ready.wait(lock, [this] { return !queue_->waiting.empty() || queue_->ended; });
    std::vector<data::Example> taken;
    while (!queue_->waiting.empty() && taken.size() < max) {
      taken.push_back(std::move(queue_->waiting.front()));
      queue_->waiting.pop_front();
    }
    if (taken.empty() && queue_->error) std::rethrow_exception(queue_->error);
    queue_->space.notify_all();
    return taken;
  }

 private:
  struct Queue {
    std::mutex mutex;
    std::condition_variable ready, space;
    std::deque<data::Example> waiting;
    std::size_t capacity = 1;
    bool ended = false;
    std::exception_ptr error;
  };

  static void read_all(Queue& queue, const tokenizer::Tokenizer& tokenizer, const data::DataOptions& options) {
    const auto hand_over = [&](std::string& text) {
      if (text.empty()) return;
      data::Example e;
      e.input_ids = tokenizer.encode(options.source_prefix + text, static_cast<std::size_t>(options.max_source_length));
      text.clear();
      std::unique_lock<std::mutex> lock(queue.mutex);
      queue.space.wait(lock, [&] { return queue.waiting.size() < queue.capacity; });
      queue.waiting.push_back(std::move(e));
      queue.ready.notify_all();
    };
    try {
      std::string line, current;
      while (std::getline(std::cin, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) {
          hand_over(current);
        } else if (current.size() < kMaxDialogueBytes) {
          if (!current.empty()) current += '\n';
          current.append(line, 0, kMaxDialogueBytes - std::min(kMaxDialogueBytes, current.size()));
        }
      }
      hand_over(current);
    } catch (...) {
      std::lock_guard<std::mutex> lock(queue.mutex);
      queue.error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(queue.mutex);
    queue.ended = true;
    queue.ready.notify_all();
  }

  std::shared_ptr<Queue> queue_;
};

// Summarizes `examples` and prints one line each, in order, flushed: a reader of stdout sees each batch's summaries
// as soon as they exist.
std::size_t print_summaries(model::Seq2SeqLMImpl& model, const std::vector<data::Example>& examples,
                            const tokenizer::Tokenizer& tokenizer, const train::EvaluationOptions& options,
                            const c10::Device& device) {
  const auto result = train::evaluate_model(model, examples, &tokenizer, options, device);
  for (const auto& p : result.predictions) {
    std::string line = p.summary;
    for (auto& c : line) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
  return result.predictions.size();
}

void run_summarize(SummarizeArgs a) {
  validate_evaluation_flags(a.batch_size, a.data, a.generation);
  const auto runtime = start_runtime(a.runtime);
  io::ModelSource source = a.hub;
  source.model_name_or_path = a.model_dir;
  source.tokenizer_name = a.tokenizer_name;
  source = io::resolve_model_source(source, download_progress());  // a Hub id's files, from the cache or the Hub
  a.model_dir = source.model_name_or_path;
  auto loaded = io::load_model(source, 0);
  auto& model = *loaded.model;
  model.to(runtime.device);
  if (loaded.tokenizer_dir.empty()) {
    throw std::invalid_argument("'" + a.model_dir + "' has no " + tokenizer::kTokenizerFiles +
                                ": pass --tokenizer_name DIR");
  }
  const std::shared_ptr<const tokenizer::Tokenizer> tokenizer_owner = families::load_tokenizer(loaded.tokenizer_dir);
  const tokenizer::Tokenizer& tokenizer = *tokenizer_owner;
  // The lengths against the tokenizer's special tokens, for stdin's text too.
  train::fit_lengths_to_model(a.data, model.config(), &tokenizer, print_warning);

  train::EvaluationOptions options;
  options.batch_size = a.batch_size;
  options.compute_loss = false;
  options.generation = train::model_generation_defaults(loaded.config_json, a.model_dir, a.model_dir);
  a.generation.apply(options.generation);
  for (const auto& warning : train::check_generation_for_model(options.generation, model.config())) {
    print_warning(warning);
  }
  options.collator.pad_token_id = model.config().pad_token_id;
  const auto batch = static_cast<std::size_t>(a.batch_size);
  const auto start = std::chrono::steady_clock::now();
  std::size_t printed = 0;
  if (!a.input_file.empty()) {
    auto examples = data::read_examples(a.input_file, tokenizer, a.data);
    for (std::size_t first = 0; first < examples.size(); first += batch) {
      std::vector<data::Example> part;
      for (std::size_t i = first; i < std::min(examples.size(), first + batch); ++i) {
        part.push_back(std::move(examples[i]));
        part.back().labels.reset();  // summaries only
      }
      printed += print_summaries(model, part, tokenizer, options, runtime.device);
    }
  } else {
    StdinDialogues dialogues(tokenizer_owner, a.data, 4 * batch);
    for (auto part = dialogues.take(batch); !part.empty(); part = dialogues.take(batch)) {
      printed += print_summaries(model, part, tokenizer, options, runtime.device);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "fitsum: %zu summaries in %.2f s\n", printed, seconds);
}

}  // namespace

void add_summarize_command(CLI::App& app) {
  auto a = std::make_shared<SummarizeArgs>();
  auto* cmd = app.add_subcommand("summarize",
                                 "Print one summary per input: a dataset file, or dialogues on stdin separated by "
                                 "blank lines");
  cmd->add_option("--model,--model_name_or_path", a->model_dir, "Hugging Face model folder, or Hub id (org/name)")
      ->required();
  add_hub_flags(*cmd, a->hub);
  cmd->add_option("--adapter_name_or_path", a->hub.adapter_name_or_path,
                  "a LoRA adapter folder (PEFT's save_pretrained or a fitsum LoRA run) added to the model, which is "
                  "its base");
  add_tokenizer_name_flag(*cmd, a->tokenizer_name);
  cmd->add_option("--input_file", a->input_file, "jsonl, json or csv (default: plain text on stdin)");
  cmd->add_option("--per_device_eval_batch_size", a->batch_size, "sources per batch")->capture_default_str();
  add_tokenization_flags(*cmd, a->data);
  add_generation_flags(*cmd, a->generation);
  add_runtime_flags(*cmd, a->runtime);
  cmd->callback([a]() { run_summarize(*a); });
}

}  // namespace fitsum::cli
