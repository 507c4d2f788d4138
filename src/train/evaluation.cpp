// Implements include/fitsum/train/evaluation.h.
#include "fitsum/train/evaluation.h"

#include <chrono>
#include <cmath>

#include <torch/torch.h>

#include "fitsum/eval/rouge_aggregate.h"
#include "fitsum/generate/generate.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/tokenizer/tokenizer.h"
#include "fitsum/util/torch_compat.h"

namespace fitsum::train {

namespace {

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

}  // namespace

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
  std::vector<std::size_t> labelled;
  for (std::size_t i = 0; i < examples.size(); ++i) {
    if (examples[i].labels) labelled.push_back(i);
  }
  if (labelled.empty()) return std::nullopt;
  EvalMode eval_mode(model);
  torch::NoGradGuard no_grad;
  // Trainer.evaluation_loop repeats each batch's mean loss per_device_eval_batch_size times (the dataloader's batch
  // size, also for a shorter last batch) and averages: the mean of the batch means (transformers 4.47).
  double sum_of_means = 0.0;
  const auto batches = batches_of(labelled, options.batch_size);
  std::size_t done = 0;
  for (const auto& batch_indices : batches) {
    if (options.should_stop && options.should_stop()) break;
    auto batch = data::collate(examples, batch_indices, options.collator);
    auto ids = batch.input_ids.to(device);
    auto mask = batch.attention_mask.to(device);
    auto labels = batch.labels.to(device);
    util::AutocastGuard autocast(device.type(), torch::kBFloat16, options.bf16);
    auto hidden = model.decode(model.shift_tokens_right(labels), model.encode(ids, mask), mask);
    // The fused head + loss: without gradients it walks the vocabulary in chunks, never holding (B, T, V) logits.
    const auto loss = model.token_loss(hidden, labels, options.label_smoothing);
    sum_of_means += loss.sum.item<double>() / static_cast<double>(std::max<std::int64_t>(1, loss.tokens));
    ++done;
    if (options.on_progress) options.on_progress("eval loss", done, batches.size());
  }
  return sum_of_means / static_cast<double>(std::max<std::size_t>(1, done));
}

EvaluationResult evaluate_model(model::Seq2SeqLMImpl& model, const std::vector<data::Example>& examples,
                                const tokenizer::Tokenizer* tokenizer, const EvaluationOptions& options,
                                const c10::Device& device) {
  const auto start = std::chrono::steady_clock::now();
  EvaluationResult result;
  const auto stopped = [&] { return options.should_stop && options.should_stop(); };
  if (options.compute_loss) result.eval_loss = evaluation_loss(model, examples, options, device);
  result.interrupted = stopped();
  if (options.generate && !examples.empty()) {
    EvalMode eval_mode(model);
    std::vector<std::size_t> all(examples.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    std::vector<eval::RougeScores> scores;
    double generated_tokens = 0.0;
    const auto batches = batches_of(all, options.batch_size);
    std::size_t done = 0;
    for (const auto& batch_indices : batches) {
      if (result.interrupted || stopped()) {
        result.interrupted = true;
        break;
      }
      // Generation needs no labels: collate the sources alone.
      std::vector<data::Example> sources;
      for (auto i : batch_indices) {
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
      for (std::size_t b = 0; b < batch_indices.size(); ++b) {
        Prediction p;
        p.index = batch_indices[b];
        p.generated_ids = strip_trailing_padding(generated.sequences, static_cast<std::int64_t>(b),
                                                 options.generation.pad_token_id, options.generation.eos_token_id);
        // run_summarization's gen_len: the non-pad tokens of the generated row.
        for (auto id : p.generated_ids) generated_tokens += id != options.generation.pad_token_id ? 1.0 : 0.0;
        if (tokenizer != nullptr) {
          p.summary = tokenizer->decode(p.generated_ids);
          const auto& labels = examples[p.index].labels;
          if (labels) {
            p.reference = tokenizer->decode(*labels);
            scores.push_back(eval::score_rouge(p.reference, p.summary, options.rouge));
          }
        }
        result.predictions.push_back(std::move(p));
      }
      ++done;
      if (options.on_progress) options.on_progress("generate", done, batches.size());
    }
    result.gen_len = generated_tokens / static_cast<double>(examples.size());
    if (!scores.empty()) result.rouge = eval::mean_rouge(scores);
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
