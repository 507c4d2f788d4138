// Implements include/fitsum/train/evaluation.h.
#include "fitsum/train/evaluation.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include <torch/torch.h>

#include "fitsum/eval/rouge_aggregate.h"
#include "fitsum/generate/generate.h"
#include "fitsum/io/hf_config.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/tokenizer/tokenizer.h"
#include "fitsum/util/files.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::train {

namespace {

constexpr std::int64_t kLabelIgnoreIndex = -100;  // HF's label padding, which the loss ignores

// Restores the model's training flag on scope exit.
class EvalMode {
 public:
  explicit EvalMode(model::Seq2SeqLMImpl& model) : model_(model), was_training_(model.is_training()) { model.eval(); }
  ~EvalMode() { model_.train(was_training_); }

 private:
  model::Seq2SeqLMImpl& model_;
  bool was_training_;
};

std::vector<std::vector<std::size_t>> batches_of(const std::vector<std::size_t>& indices, std::int64_t size) {
  std::vector<std::vector<std::size_t>> out;
  for (std::size_t start = 0; start < indices.size(); start += static_cast<std::size_t>(size)) {
    out.emplace_back(indices.begin() + static_cast<std::ptrdiff_t>(start),
                     indices.begin() + static_cast<std::ptrdiff_t>(std::min(indices.size(), start + size)));
  }
  return out;
}

void check_sharding(const EvaluationOptions& options) {
  if (options.shards < 1 || options.shard < 0 || options.shard >= options.shards ||
      (options.shards > 1 && !options.sum_over_processes)) {
    throw std::invalid_argument("evaluation shard " + std::to_string(options.shard) + " of " +
                                std::to_string(options.shards) +
                                ": needs 0 <= shard < shards and, with several shards, sum_over_processes");
  }
}

// The one-process batches are dealt round-robin: batch b runs on shard b % shards.
bool runs_here(std::size_t batch, const EvaluationOptions& options) {
  return batch % static_cast<std::size_t>(options.shards) == static_cast<std::size_t>(options.shard);
}

std::size_t batches_here(std::size_t batches, const EvaluationOptions& options) {
  std::size_t n = 0;
  for (std::size_t b = 0; b < batches; ++b) n += runs_here(b, options) ? 1 : 0;
  return n;
}

// Every process holds zeros where another process's numbers go, so the sum is a gather (x + 0 is exact).
void gather(const EvaluationOptions& options, torch::Tensor& tensor) {
  if (options.shards > 1) options.sum_over_processes(tensor);
}

struct LossPass {
  std::optional<double> loss;
  bool complete = true;
};

LossPass loss_pass(model::Seq2SeqLMImpl& model, const std::vector<data::Example>& examples,
                   const EvaluationOptions& options, const c10::Device& device) {
  check_sharding(options);
  std::vector<std::size_t> labelled;
  for (std::size_t i = 0; i < examples.size(); ++i) {
    if (examples[i].labels) labelled.push_back(i);
  }
  if (labelled.empty()) return {};
  EvalMode eval_mode(model);
  torch::NoGradGuard no_grad;
  const auto batches = batches_of(labelled, options.batch_size);
  const auto n = static_cast<std::int64_t>(batches.size());
  // Row 0: each batch's mean token loss; row 1: 1 where the batch ran.
  auto table = torch::zeros({2, n}, torch::kDouble);
  auto* means = table.data_ptr<double>();
  auto* ran = means + n;
  const auto total_here = batches_here(batches.size(), options);
  std::size_t done_here = 0;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    if (!runs_here(b, options)) continue;
    if (options.should_stop && options.should_stop()) break;
    auto batch = data::collate(examples, batches[b], options.collator);
    auto ids = batch.input_ids.to(device);
    auto mask = batch.attention_mask.to(device);
    auto labels = batch.labels.to(device);
    util::AutocastGuard autocast(device.type(), torch::kBFloat16, options.bf16);
    auto hidden = model.decode(model.shift_tokens_right(labels), model.encode(ids, mask), mask);
    // The fused head + loss: without gradients it walks the vocabulary in chunks, never holding (B, T, V) logits.
    const auto loss = model.token_loss(hidden, labels, options.label_smoothing);
    means[b] = loss.sum.item<double>() / static_cast<double>(std::max<std::int64_t>(1, loss.tokens));
    ran[b] = 1.0;
    ++done_here;
    if (options.on_progress) options.on_progress("eval loss", done_here, total_here);
  }
  gather(options, table);
  means = table.data_ptr<double>();
  ran = means + n;
  // Trainer.evaluation_loop repeats each batch's mean loss per_device_eval_batch_size times (the dataloader's batch
  // size, also for a shorter last batch) and averages: the mean of the batch means (transformers 4.47), summed in
  // batch order.
  double sum_of_means = 0.0;
  std::int64_t done = 0;
  for (std::int64_t b = 0; b < n; ++b) {
    if (ran[b] == 0.0) continue;
    sum_of_means += means[b];
    ++done;
  }
  return {sum_of_means / static_cast<double>(std::max<std::int64_t>(1, done)), done == n};
}

// A model's embedding table may have more rows than its tokenizer has ids (T5: 32128 against 32100). A generated id
// past the tokenizer's is skipped when decoding, as the fast tokenizer's batch_decode that run_summarization uses
// skips an id it has no token for.
std::vector<std::int64_t> ids_the_tokenizer_knows(const std::vector<std::int64_t>& ids,
                                                  const tokenizer::Tokenizer& tokenizer) {
  std::vector<std::int64_t> known;
  known.reserve(ids.size());
  for (const auto id : ids) {
    if (id < tokenizer.vocab_size()) known.push_back(id);
  }
  return known;
}

struct Generated {
  std::vector<std::vector<std::int64_t>> ids;  // per example; empty where its batch did not run
  std::vector<bool> here;                      // generated by this process (the others' gathered)
};

// The generated ids of every example whose batch ran, here or (gathered) on another process.
Generated generation_pass(model::Seq2SeqLMImpl& model, const std::vector<data::Example>& examples,
                          const EvaluationOptions& options, const c10::Device& device) {
  EvalMode eval_mode(model);
  std::vector<std::size_t> all(examples.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  const auto batches = batches_of(all, options.batch_size);
  const auto total_here = batches_here(batches.size(), options);
  Generated out{std::vector<std::vector<std::int64_t>>(examples.size()), std::vector<bool>(examples.size(), false)};
  auto& generated_ids = out.ids;
  std::size_t done_here = 0;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    if (!runs_here(b, options)) continue;
    if (options.should_stop && options.should_stop()) break;
    // Generation needs no labels: collate the sources alone.
    std::vector<data::Example> sources;
    for (auto i : batches[b]) {
      data::Example e;
      e.input_ids = examples[i].input_ids;
      e.attention_mask = examples[i].attention_mask;
      sources.push_back(std::move(e));
    }
    std::vector<std::size_t> local(sources.size());
    for (std::size_t i = 0; i < local.size(); ++i) local[i] = i;
    auto batch = data::collate(sources, local, options.collator);
    util::AutocastGuard autocast(device.type(), torch::kBFloat16, options.bf16);
    const auto generated =
        generate::generate(model, batch.input_ids.to(device), batch.attention_mask.to(device), options.generation);
    for (std::size_t row = 0; row < batches[b].size(); ++row) {
      generated_ids[batches[b][row]] =
          strip_trailing_padding(generated.sequences, static_cast<std::int64_t>(row), options.generation.pad_token_id,
                                 options.generation.eos_token_id);
      out.here[batches[b][row]] = true;
    }
    ++done_here;
    if (options.on_progress) options.on_progress("generate", done_here, total_here);
  }
  if (options.shards == 1) return out;
  const auto n = static_cast<std::int64_t>(examples.size());
  auto lengths = torch::zeros({n}, torch::kLong);
  for (std::int64_t i = 0; i < n; ++i) lengths[i] = static_cast<std::int64_t>(generated_ids[i].size());
  gather(options, lengths);
  auto ids = torch::zeros({n, std::max<std::int64_t>(1, lengths.max().item<std::int64_t>())}, torch::kLong);
  for (std::int64_t i = 0; i < n; ++i) {
    std::copy(generated_ids[i].begin(), generated_ids[i].end(), ids[i].data_ptr<std::int64_t>());
  }
  gather(options, ids);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto* row = ids[i].data_ptr<std::int64_t>();
    generated_ids[i].assign(row, row + lengths[i].item<std::int64_t>());
  }
  return out;
}

// ROUGE of each generated example with labels, scored on the process that generated it (`here`) and gathered.
std::vector<std::optional<eval::RougeScores>> score_pass(const std::vector<Prediction>& predictions,
                                                         const std::vector<data::Example>& examples,
                                                         const std::vector<bool>& here,
                                                         const EvaluationOptions& options) {
  constexpr std::int64_t kColumns = 1 + 3 * static_cast<std::int64_t>(eval::kNumRougeTypes);
  auto table = torch::zeros({static_cast<std::int64_t>(predictions.size()), kColumns}, torch::kDouble);
  for (std::size_t k = 0; k < predictions.size(); ++k) {
    const auto& p = predictions[k];
    if (!examples[p.index].labels || !here[p.index]) continue;
    const auto scores = eval::score_rouge(p.reference, p.summary, options.rouge);
    auto* row = table[static_cast<std::int64_t>(k)].data_ptr<double>();
    row[0] = 1.0;
    for (std::size_t t = 0; t < eval::kNumRougeTypes; ++t) {
      row[1 + 3 * t] = scores.by_type[t].precision;
      row[2 + 3 * t] = scores.by_type[t].recall;
      row[3 + 3 * t] = scores.by_type[t].fmeasure;
    }
  }
  gather(options, table);
  std::vector<std::optional<eval::RougeScores>> out(predictions.size());
  for (std::size_t k = 0; k < predictions.size(); ++k) {
    const auto* row = table[static_cast<std::int64_t>(k)].data_ptr<double>();
    if (row[0] == 0.0) continue;
    eval::RougeScores scores;
    for (std::size_t t = 0; t < eval::kNumRougeTypes; ++t) {
      scores.by_type[t] = {row[1 + 3 * t], row[2 + 3 * t], row[3 + 3 * t]};
    }
    out[k] = scores;
  }
  return out;
}

}  // namespace

generate::GenerationOptions model_generation_defaults(const nlohmann::json& config_json, const std::string& folder,
                                                      const std::string& config_name) {
  namespace fs = std::filesystem;
  const fs::path generation_file = fs::path(folder) / "generation_config.json";
  std::error_code error;  // a name that is there but no readable file (a link loop) is read, to be named in one line
  const bool present = !folder.empty() && fs::exists(fs::symlink_status(generation_file, error));
  return generate::generation_options_from_hf(io::with_class_token_ids(config_json),
                                              present ? util::read_json_file(generation_file) : nlohmann::json(nullptr),
                                              folder.empty() ? config_name : folder);
}

std::vector<std::string> evaluation_metric_keys(bool labelled, bool generated, bool decoded) {
  std::vector<std::string> keys;
  if (labelled) keys.emplace_back("eval_loss");
  if (labelled && generated && decoded) {
    for (auto type : eval::kRougeTypes) keys.push_back("eval_" + std::string(eval::rouge_type_name(type)));
  }
  if (generated) keys.emplace_back("eval_gen_len");
  keys.emplace_back("eval_runtime");
  keys.emplace_back("eval_samples_per_second");
  return keys;
}

void check_evaluation_examples(const std::vector<data::Example>& examples, const std::string& file, const char* what,
                               std::int64_t vocab_size, const tokenizer::Tokenizer* tokenizer, bool decoded) {
  if (examples.empty()) {
    throw std::invalid_argument(std::string(what) + " '" + file +
                                "' has no examples to evaluate (no records, or every one skipped); give a file "
                                "with records");
  }
  const auto check = [&](const data::Example& e, const char* field, const std::vector<data::TokenId>& ids,
                         std::int64_t limit, const char* vocabulary, bool ignore_index) {
    for (const auto id : ids) {
      if ((id >= 0 && id < limit) || (ignore_index && id == kLabelIgnoreIndex)) continue;
      throw std::invalid_argument(file + ":" + std::to_string(e.line) + ": field '" + field + "': token id " +
                                  std::to_string(id) + " is outside " + vocabulary + " 0.." +
                                  std::to_string(limit - 1) + " (tokenized with another tokenizer?)");
    }
  };
  // ROUGE decodes the labels: their ids must be the tokenizer's too (a model's table may have more rows).
  const bool by_tokenizer = decoded && tokenizer != nullptr && tokenizer->vocab_size() < vocab_size;
  const auto label_limit = by_tokenizer ? static_cast<std::int64_t>(tokenizer->vocab_size()) : vocab_size;
  for (const auto& e : examples) {
    check(e, "input_ids", e.input_ids, vocab_size, "the model's vocabulary", false);
    if (e.labels) {
      check(e, "labels", *e.labels, label_limit,
            by_tokenizer ? "the vocabulary of the tokenizer that decodes them for ROUGE" : "the model's vocabulary",
            true);
    }
  }
}

std::vector<std::int64_t> reference_ids(const std::vector<data::TokenId>& labels, std::int64_t pad_id) {
  std::vector<std::int64_t> ids(labels.begin(), labels.end());
  for (auto& id : ids) {
    if (id == kLabelIgnoreIndex) id = pad_id;
  }
  return ids;
}

std::vector<std::int64_t> strip_trailing_padding(const at::Tensor& sequences, std::int64_t row, std::int64_t pad_id,
                                                 std::int64_t eos_id) {
  auto r = sequences[row].to(torch::kCPU).contiguous();
  const auto* data = r.data_ptr<std::int64_t>();
  std::int64_t length = r.numel();
  // Keep the start token (which may equal pad) and everything up to the first eos after it.
  for (std::int64_t i = 1; i < r.numel(); ++i) {
    if (data[i] == eos_id) {
      length = i + 1;
      break;
    }
  }
  while (length > 1 && data[length - 1] == pad_id && data[length - 1] != eos_id) --length;
  return std::vector<std::int64_t>(data, data + length);
}

std::optional<double> evaluation_loss(model::Seq2SeqLMImpl& model, const std::vector<data::Example>& examples,
                                      const EvaluationOptions& options, const c10::Device& device) {
  return loss_pass(model, examples, options, device).loss;
}

EvaluationResult evaluate_model(model::Seq2SeqLMImpl& model, const std::vector<data::Example>& examples,
                                const tokenizer::Tokenizer* tokenizer, const EvaluationOptions& options,
                                const c10::Device& device) {
  check_sharding(options);
  const auto start = std::chrono::steady_clock::now();
  EvaluationResult result;
  if (options.compute_loss) {
    const auto pass = loss_pass(model, examples, options, device);
    result.eval_loss = pass.loss;
    result.interrupted = !pass.complete;
  }
  if (options.generate && !examples.empty()) {
    // After an interrupted loss pass no batch generates, but every process still takes part in the gathers.
    auto run = options;
    if (result.interrupted) run.should_stop = [] { return true; };
    const auto generated = generation_pass(model, examples, run, device);
    const auto& generated_ids = generated.ids;
    double generated_tokens = 0.0;
    for (std::size_t i = 0; i < examples.size(); ++i) {
      if (generated_ids[i].empty()) {
        result.interrupted = true;
        continue;
      }
      Prediction p;
      p.index = i;
      p.generated_ids = generated_ids[i];
      // run_summarization's gen_len: the non-pad tokens of the generated row.
      for (auto id : p.generated_ids) generated_tokens += id != options.generation.pad_token_id ? 1.0 : 0.0;
      if (tokenizer != nullptr) {
        p.summary = tokenizer->decode(ids_the_tokenizer_knows(p.generated_ids, *tokenizer));
        if (examples[i].labels)
          p.reference = tokenizer->decode(reference_ids(*examples[i].labels, tokenizer->pad_id()));
      }
      result.predictions.push_back(std::move(p));
    }
    result.gen_len = generated_tokens / static_cast<double>(examples.size());
    if (tokenizer != nullptr) {
      std::vector<eval::RougeScores> scores;
      for (const auto& s : score_pass(result.predictions, examples, generated.here, options)) {
        if (s) scores.push_back(*s);
      }
      if (!scores.empty()) result.rouge = eval::mean_rouge(scores);
    }
  }
  result.runtime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.samples_per_second = static_cast<double>(examples.size()) / std::max(result.runtime_seconds, 1e-9);
  return result;
}

nlohmann::ordered_json evaluation_metrics(const EvaluationResult& result, bool generated) {
  nlohmann::ordered_json metrics;
  if (result.eval_loss) metrics["eval_loss"] = *result.eval_loss;
  if (result.rouge) {
    for (auto type : eval::kRougeTypes) {
      metrics["eval_" + std::string(eval::rouge_type_name(type))] = (*result.rouge)[type].fmeasure * 100.0;
    }
  }
  if (generated) metrics["eval_gen_len"] = result.gen_len;
  metrics["eval_runtime"] = result.runtime_seconds;
  metrics["eval_samples_per_second"] = result.samples_per_second;
  return metrics;
}

}  // namespace fitsum::train
