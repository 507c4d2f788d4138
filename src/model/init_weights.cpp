// Implements init_weights of include/fitsum/model/seq2seq.h: each family's HF _init_weights (PegasusPreTrainedModel
// and BartPreTrainedModel: normals of init_std; T5PreTrainedModel: normals scaled by the fan-in).
#include <cmath>
#include <string>

#include <torch/torch.h>

#include "fitsum/model/seq2seq.h"
#include "fitsum/util/strings.h"

namespace fitsum::model {

namespace {

using util::ends_with;

// The blocks layout's modules as T5PreTrainedModel._init_weights draws them: normals scaled by initializer_factor
// (init_std here) and the fan-in, by module name.
double block_init_std(const std::string& name, const ModelConfig& c) {
  const double factor = c.init_std;
  const double d_model = static_cast<double>(c.d_model);
  const double d_kv = static_cast<double>(c.encoder_head_dim());
  const double heads = static_cast<double>(c.encoder_attention_heads);
  if (ends_with(name, ".q.weight")) return factor * std::pow(d_model * d_kv, -0.5);
  if (ends_with(name, ".o.weight")) return factor * std::pow(heads * d_kv, -0.5);
  if (ends_with(name, ".wo.weight")) return factor * std::pow(static_cast<double>(c.encoder_ffn_dim), -0.5);
  if (name == "shared.weight" || name == "lm_head.weight") return factor;
  return factor * std::pow(d_model, -0.5);  // k, v, wi, wi_0, wi_1, relative_attention_bias
}

}  // namespace

void init_weights(Seq2SeqLMImpl& model, std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto& config = model.config();
  for (auto& item : model.named_parameters()) {
    const auto& name = item.key();
    auto& p = item.value();
    const bool blocks = config.module_layout == ModuleLayout::blocks;
    const double std = blocks ? block_init_std(name, config) : config.init_std;
    const bool is_norm =
        name.find("layer_norm") != std::string::npos || name.find("layernorm_embedding") != std::string::npos;
    if (is_norm) {
      if (ends_with(name, ".weight")) {
        p.fill_(blocks ? config.init_std : 1.0);  // T5LayerNorm's weight: initializer_factor
      } else {
        p.zero_();
      }
    } else if (ends_with(name, ".bias")) {
      p.zero_();
    } else {
      // Drawn on the CPU with a private generator, so the result does not depend on the device.
      auto values = torch::empty(p.sizes(), torch::kFloat32);
      values.normal_(0.0, std, generator);
      p.copy_(values);
    }
  }
  const auto pad = model.config().embedding_padding_idx;
  if (pad >= 0) {
    model.model->shared->weight[pad].zero_();
  }
  if (model.final_logits_bias.defined()) model.final_logits_bias.zero_();
}

}  // namespace fitsum::model
