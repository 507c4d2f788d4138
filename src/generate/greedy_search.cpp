// Implements include/fitsum/generate/greedy_search.h, following transformers' GenerationMixin.greedy_search: the
// same processors on the raw logits, the same stopping rule (all sequences finished, or max_length reached), the
// same output (pad after eos). Unlike HF, finished rows leave the batch instead of being decoded and overwritten.
#include "fitsum/generate/greedy_search.h"

#include <stdexcept>
#include <vector>

#include <torch/torch.h>

#include "fitsum/generate/logits_processors.h"
#include "fitsum/generate/step_decoder.h"

namespace fitsum::generate {

GenerationResult greedy_search(model::Seq2SeqLMImpl& model, const at::Tensor& input_ids,
                               const at::Tensor& attention_mask, const GenerationOptions& options) {
  options.validate_for(model.config());
  if (options.num_beams != 1) {
    throw std::invalid_argument("greedy_search decodes one sequence per source, but num_beams is " +
                                std::to_string(options.num_beams) + "; call beam_search or generate()");
  }
  check_inputs(model, input_ids, attention_mask);
  EvalModeGuard inference(model);

  const auto batch = input_ids.size(0);
  const auto max_length = options.effective_max_length();
  GenerationResult result;

  StepDecoder decoder(model, model.encode(input_ids, attention_mask), attention_mask, options.use_cache);
  // Every source's output row, filled as tokens come; rows that finish early keep the pad that is already there.
  auto output = torch::full({batch, max_length}, options.pad_token_id, torch::kLong);  // (B, max_length)
  output.select(1, 0).fill_(options.decoder_start_token_id);
  auto running = output.narrow(1, 0, 1).clone();   // (R, T): the unfinished rows' tokens so far
  std::vector<std::int64_t> source_of_row(batch);  // output row of each unfinished row
  for (std::int64_t b = 0; b < batch; ++b) source_of_row[b] = b;

  std::int64_t length = 1;
  while (true) {
    auto scores = decoder.next_logits(running);  // (R, V)
    ++result.stats.decoder_steps;
    result.stats.decoded_rows += decoder.rows();
    apply_logits_processors(scores, running, options);
    auto next = scores.argmax(-1).to(torch::kCPU);  // (R)
    const auto* next_tokens = next.data_ptr<std::int64_t>();
    auto out = output.accessor<std::int64_t, 2>();
    std::vector<std::int64_t> keep;
    for (std::int64_t r = 0; r < next.size(0); ++r) {
      out[source_of_row[r]][length] = next_tokens[r];
      if (next_tokens[r] != options.eos_token_id) keep.push_back(r);
    }
    running = torch::cat({running, next.unsqueeze(1)}, 1);
    ++length;
    if (keep.empty() || length >= max_length) {
      break;
    }
    if (static_cast<std::int64_t>(keep.size()) < decoder.rows()) {
      // Finished rows leave the batch: their cache rows are dropped and no further step decodes them.
      auto index = torch::tensor(keep, torch::kLong);
      decoder.select(index);
      running = running.index_select(0, index);
      std::vector<std::int64_t> kept_sources;
      for (auto r : keep) kept_sources.push_back(source_of_row[r]);
      source_of_row = std::move(kept_sources);
    }
  }
  result.sequences = output.narrow(1, 0, length).contiguous();
  return result;
}

}  // namespace fitsum::generate
