// Implements include/fitsum/train/floating_point_ops.h.
#include "fitsum/train/floating_point_ops.h"

#include <set>
#include <string>

#include <torch/torch.h>

#include "fitsum/model/seq2seq.h"

namespace fitsum::train {

namespace {

// The names HF's embedding modules (nn.Embedding) have in the checkpoint (and so in fitsum's modules): with the
// long-input encoders', PEGASUS-X's global tokens and LongT5's transient-global relative bias.
bool in_embedding_module(const std::string& name) {
  for (const char* module : {"shared", "embed_tokens", "embed_positions", "relative_attention_bias", "embed_global",
                             "global_relative_attention_bias"}) {
    const std::string suffix = std::string(module) + ".weight";
    if (name == suffix ||
        (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         name[name.size() - suffix.size() - 1] == '.')) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::int64_t non_embedding_parameter_count(const model::Seq2SeqLMImpl& model) {
  // A tensor registered under several names (a tied head, T5's shared relative bias) is one tensor: HF's
  // named_parameters() lists it once, and it is an embedding when any of its names is one.
  std::set<const void*> embedding;
  const auto parameters = model.named_parameters(/*recurse=*/true);
  for (const auto& item : parameters) {
    if (in_embedding_module(item.key())) embedding.insert(item.value().unsafeGetTensorImpl());
  }
  std::set<const void*> counted;
  std::int64_t total = 0;
  for (const auto& item : parameters) {
    const void* tensor = item.value().unsafeGetTensorImpl();
    if (embedding.count(tensor) != 0 || !counted.insert(tensor).second) continue;
    total += item.value().numel();
  }
  return total;
}

double floating_point_ops(std::int64_t input_elements, std::int64_t non_embedding_parameters) {
  return 6.0 * static_cast<double>(input_elements) * static_cast<double>(non_embedding_parameters);
}

}  // namespace fitsum::train
