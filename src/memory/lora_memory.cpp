// Implements include/fitsum/memory/lora_memory.h: adapter counts from a reduced-depth copy, and the ladder of
// configurations the planner names.
#include "fitsum/memory/lora_memory.h"

#include <regex>
#include <sstream>
#include <unordered_set>

#include <torch/torch.h>

#include "fitsum/model/seq2seq.h"

namespace fitsum::memory {

void apply_planned_lora(model::Seq2SeqLMImpl& model, const model::LoraConfig& lora, bool base_bfloat16) {
  model::apply_lora(model, lora, 0);
  if (base_bfloat16) model::hold_frozen_linears_in_bfloat16(model);
}

namespace {

// Where a tensor of the copy sits: outside the stacks' layers, or in layer 0 or 1 of the encoder or the decoder.
enum class Place { other, encoder_first, encoder_later, decoder_first, decoder_later };

Place place_of(const std::string& name) {
  // PEGASUS / BART: "model.encoder.layers.1.", T5: "encoder.block.1."
  static const std::regex layer(R"((^|\.)(encoder|decoder)\.(layers|block)\.(\d+)\.)");
  std::smatch m;
  if (!std::regex_search(name, m, layer)) return Place::other;
  const bool first = m[4].str() == "0";
  if (m[2].str() == "encoder") return first ? Place::encoder_first : Place::encoder_later;
  return first ? Place::decoder_first : Place::decoder_later;
}

bool is_adapter(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

}  // namespace

LoraMemory lora_memory(model::Seq2SeqLMImpl& copy, const model::ModelConfig& config) {
  const auto& c = copy.config();
  if (c.encoder_layers != 2 || c.decoder_layers != 2) {
    throw std::invalid_argument("lora_memory: the copy has " + std::to_string(c.encoder_layers) + " + " +
                                std::to_string(c.decoder_layers) + " layers, not 2 + 2");
  }
  const auto base = model::count_parameters(config);
  // How often each of the copy's tensors is in the full model.
  const auto repeats = [&](Place place) -> std::int64_t {
    switch (place) {
      case Place::encoder_later: return config.encoder_layers - 1;
      case Place::decoder_later: return config.decoder_layers - 1;
      case Place::encoder_first: return config.encoder_layers > 0 ? 1 : 0;
      case Place::decoder_first: return config.decoder_layers > 0 ? 1 : 0;
      case Place::other: return 1;
    }
    return 1;
  };
  LoraMemory out;
  std::int64_t adapters = 0, bfloat16 = 0;
  std::unordered_set<const void*> seen;  // a shared tensor (the tied embedding) is registered under several names
  for (const auto& item : copy.named_parameters()) {
    const auto& p = item.value();
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
    const auto n = repeats(place_of(item.key()));
    const auto elements = p.numel();
    if (p.scalar_type() == torch::kBFloat16) bfloat16 += n * elements;
    if (is_adapter(item.key())) adapters += n * elements;
    if (!p.requires_grad()) continue;
    const bool matrix = p.dim() >= 2;
    const std::int64_t rows_plus_cols = matrix ? p.size(0) + p.numel() / p.size(0) : 0;
    for (std::int64_t i = 0; i < n; ++i) out.counts.trainable_tensors.push_back({elements, rows_plus_cols});
    out.counts.trainable += n * elements;
    (matrix ? out.counts.matrix_elements : out.counts.vector_elements) += n * elements;
    if (matrix) out.counts.matrix_rows_plus_cols += n * rows_plus_cols;
  }
  // The base's weights and buffers as the config counts them, plus the adapters, less what trains.
  out.counts.frozen = base.total() + adapters - out.counts.trainable;
  out.weight_bytes = static_cast<std::uint64_t>(4 * out.counts.total() - 2 * bfloat16);
  return out;
}

LoraMemory lora_memory(const model::ModelConfig& config, const model::LoraConfig& lora, bool base_bfloat16) {
  auto reduced = config;
  reduced.encoder_layers = 2;
  reduced.decoder_layers = 2;
  model::Seq2SeqLM copy(reduced);
  apply_planned_lora(*copy, lora, base_bfloat16);
  return lora_memory(*copy, config);
}

std::string lora_arguments(const model::LoraConfig& lora, bool base_bfloat16) {
  const model::LoraConfig defaults;
  std::ostringstream out;
  out << "--lora_r " << lora.r;
  if (lora.lora_alpha != defaults.lora_alpha) out << " --lora_alpha " << lora.lora_alpha;
  if (lora.lora_dropout != defaults.lora_dropout) out << " --lora_dropout " << lora.lora_dropout;
  const auto list = [&out](const char* flag, const std::vector<std::string>& names) {
    if (names.empty()) return;
    out << " " << flag << " ";
    for (std::size_t i = 0; i < names.size(); ++i) out << (i ? "," : "") << names[i];
  };
  list("--lora_target_modules", lora.target_modules);
  if (lora.bias != defaults.bias) out << " --lora_bias " << model::lora_bias_name(lora.bias);
  list("--lora_modules_to_save", lora.modules_to_save);
  if (lora.use_rslora) out << " --use_rslora";
  if (base_bfloat16) out << " --base_dtype bfloat16";
  return out.str();
}

std::vector<LoraRung> lora_suggestion_ladder() {
  LoraRung all_linear;
  all_linear.lora.r = 16;
  all_linear.lora.target_modules = {"all-linear"};
  auto bfloat16_base = all_linear;
  bfloat16_base.base_bfloat16 = true;
  LoraRung defaults;  // the family's default targets: empty target_modules
  defaults.lora.r = 8;
  defaults.base_bfloat16 = true;
  return {all_linear, bfloat16_base, defaults};
}

}  // namespace fitsum::memory
