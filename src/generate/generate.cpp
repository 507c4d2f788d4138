// Implements include/fitsum/generate/generate.h: input checks and the choice of strategy, as HF's generate() makes
// it for do_sample=False (greedy for one beam, beam search for more).
#include "fitsum/generate/generate.h"

#include <sstream>
#include <stdexcept>

#include <torch/torch.h>

#include "fitsum/generate/beam_search.h"
#include "fitsum/generate/greedy_search.h"
#include "fitsum/model/seq2seq.h"

namespace fitsum::generate {

namespace {

std::string shape(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

}  // namespace

void check_inputs(model::Seq2SeqLMImpl& model, const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  if (!input_ids.defined() || !attention_mask.defined()) {
    throw std::invalid_argument("generation needs both input_ids and attention_mask");
  }
  if (input_ids.dim() != 2 || input_ids.size(0) < 1 || input_ids.size(1) < 1) {
    throw std::invalid_argument("input_ids must be (batch, source_length) with at least one token, got " +
                                shape(input_ids));
  }
  if (attention_mask.sizes() != input_ids.sizes()) {
    throw std::invalid_argument("attention_mask " + shape(attention_mask) + " must have the shape of input_ids " +
                                shape(input_ids));
  }
  if (input_ids.scalar_type() != torch::kLong || at::isFloatingType(attention_mask.scalar_type())) {
    throw std::invalid_argument("input_ids must be int64 and attention_mask integer (0/1)");
  }
  const auto device = model.lm_head_weight().device();
  if (input_ids.device() != device || attention_mask.device() != device) {
    throw std::invalid_argument("input_ids and attention_mask must be on the model's device (" + device.str() + ")");
  }
}

GenerationResult generate(model::Seq2SeqLMImpl& model, const at::Tensor& input_ids, const at::Tensor& attention_mask,
                          const GenerationOptions& options) {
  options.validate_for(model.config());
  return options.num_beams == 1 ? greedy_search(model, input_ids, attention_mask, options)
                                : beam_search(model, input_ids, attention_mask, options);
}

}  // namespace fitsum::generate
