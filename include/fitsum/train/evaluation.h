// Evaluating a model on a dataset the way HF's Seq2SeqTrainer.evaluate / predict with predict_with_generate and
// run_summarization's compute_metrics do it: the loss on the labels (the mean over batches of each batch's mean token
// loss), generation with the decoding options, and ROUGE of the decoded predictions against the decoded labels
// (special tokens skipped, whitespace stripped), as exact means. The loop that runs the model lives here, in train/,
// above the model; eval/ holds the metrics alone (pure string code).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include "fitsum/data/collator.h"
#include "fitsum/data/dataset.h"
#include "fitsum/eval/rouge.h"
#include "fitsum/generate/options.h"

namespace fitsum::model {
class Seq2SeqLMImpl;
}
namespace fitsum::tokenizer {
class Tokenizer;
}

namespace fitsum::train {

struct EvaluationOptions {
  std::int64_t batch_size = 8;  // per_device_eval_batch_size
  bool compute_loss = true;     // when the examples have labels
  bool generate = true;         // predict_with_generate
  generate::GenerationOptions generation;
  eval::RougeOptions rouge{/*use_stemmer=*/true, /*split_sentences=*/false};
  double label_smoothing = 0.0;
  bool bf16 = false;
  data::CollatorOptions collator;
  // Called after each batch of a pass: phase ("eval loss" or "generate"), batches done, batches in the pass.
  std::function<void(const char* phase, std::size_t done, std::size_t total)> on_progress;
  std::function<bool()> should_stop;  // checked before each batch: a stop request ends the evaluation early
  // Sharded across the processes of a data-parallel job: this process runs batches shard, shard + shards, ... of the
  // one-process batching, and `sum_over_processes` (a sum of a CPU tensor over the processes, in place, called the
  // same number of times on every process) gathers what each ran, so that every process ends with the one-process
  // result: the same batches, the per-batch and per-example numbers combined in the one-process order.
  int shard = 0;
  int shards = 1;
  std::function<void(at::Tensor&)> sum_over_processes;
};

struct Prediction {
  std::size_t index = 0;                    // position in the evaluated examples
  std::vector<std::int64_t> generated_ids;  // as HF generate returns it: start token first, eos kept, no padding
  std::string summary;                      // decoded (empty without a tokenizer)
  std::string reference;                    // the decoded labels ROUGE compared it with (empty without labels)
};

struct EvaluationResult {
  std::optional<double> eval_loss;
  std::optional<eval::RougeScores> rouge;  // exact means over the examples with labels
  double gen_len = 0.0;                    // mean generated tokens (non-pad, as run_summarization counts)
  double samples_per_second = 0.0;
  double runtime_seconds = 0.0;
  std::vector<Prediction> predictions;
  bool interrupted = false;  // should_stop() ended it early (on any process): the numbers cover only part
};

// The loss HF's evaluation loop reports. Examples without labels are skipped; nullopt when none has any.
// The decoding defaults HF's generate() starts from for a loaded model: the folder's generation_config.json when it
// has one, else config.json with its config class's token ids (io::with_class_token_ids). `folder` is empty for a
// model built from a config, which `config_name` names in messages then.
generate::GenerationOptions model_generation_defaults(const nlohmann::json& config_json, const std::string& folder,
                                                      const std::string& config_name);

std::optional<double> evaluation_loss(model::Seq2SeqLMImpl& model, const std::vector<data::Example>& examples,
                                      const EvaluationOptions& options, const c10::Device& device);

// Loss, generation and ROUGE (ROUGE needs a tokenizer and labels). The model's training flag is restored.
EvaluationResult evaluate_model(model::Seq2SeqLMImpl& model, const std::vector<data::Example>& examples,
                                const tokenizer::Tokenizer* tokenizer, const EvaluationOptions& options,
                                const c10::Device& device);

// The metrics as Seq2SeqTrainer reports them: eval_loss, eval_rouge1/2/L/Lsum (x100), eval_gen_len (when
// generating), eval_runtime, eval_samples_per_second.
nlohmann::ordered_json evaluation_metrics(const EvaluationResult& result, bool generated);

// The keys evaluation_metrics() reports for an evaluation whose examples have labels (`labelled`: eval_loss), that
// generates (`generated`: eval_gen_len) and decodes with a tokenizer (`decoded`, with labels and generation: ROUGE):
// eval_loss, eval_rouge1, eval_rouge2, eval_rougeL, eval_rougeLsum, eval_gen_len, eval_runtime,
// eval_samples_per_second, in that order, those that apply.
std::vector<std::string> evaluation_metric_keys(bool labelled, bool generated, bool decoded);

// What evaluate_model would otherwise find only at the end of an evaluation of `examples`, read from `file`, refused
// before it runs: no examples at all (std::invalid_argument naming `file` and `what`, e.g. "test_file"); a token id
// outside the model's vocabulary of `vocab_size` (labels may hold HF's ignore index -100); and, where the labels are
// decoded for ROUGE (`decoded`: generating with a tokenizer), a label id the tokenizer cannot decode. The id errors
// are std::invalid_argument naming the file, the record's line and the field.
void check_evaluation_examples(const std::vector<data::Example>& examples, const std::string& file, const char* what,
                               std::int64_t vocab_size, const tokenizer::Tokenizer* tokenizer, bool decoded);

// The labels as run_summarization's compute_metrics decodes them: HF's ignore index -100 (label padding in
// pre-tokenized data) replaced by the pad id.
std::vector<std::int64_t> reference_ids(const std::vector<data::TokenId>& labels, std::int64_t pad_id);

// The generated ids of one row of a (B, L) result, trailing padding removed (the eos is kept).
std::vector<std::int64_t> strip_trailing_padding(const at::Tensor& sequences, std::int64_t row, std::int64_t pad_id,
                                                 std::int64_t eos_id);

}  // namespace fitsum::train
