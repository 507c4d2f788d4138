// Implements include/fitsum/train/lora_setup.h.
#include "fitsum/train/lora_setup.h"

#include <algorithm>
#include <cstdio>
#include <vector>
#include <stdexcept>

#include <torch/torch.h>

#include "fitsum/model/lora.h"
#include "fitsum/util/bytes.h"

namespace fitsum::train {

namespace {

// 9216, 1.18M, 569M
std::string count_text(std::int64_t count) {
  if (count < 1'000'000) return std::to_string(count);
  char text[32];
  std::snprintf(text, sizeof(text), count < 10'000'000 ? "%.2fM" : "%.0fM", static_cast<double>(count) / 1e6);
  return text;
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

// "LoRA r 16, alpha 32 (scaling 2) on 32 layers (v_proj, q_proj): 1.18M of 570M parameters train"
std::string describe(model::Seq2SeqLMImpl& model, const model::LoraConfig& lora) {
  const auto targets = model::lora_target_names(model, lora);
  std::vector<std::string> kinds;  // the layers' last name components, as target_modules names them
  std::string kind_list;
  for (const auto& name : targets) {
    const auto last = name.substr(name.rfind('.') + 1);
    if (std::find(kinds.begin(), kinds.end(), last) != kinds.end()) continue;
    kinds.push_back(last);
    kind_list += (kind_list.empty() ? "" : ", ") + last;
  }
  std::int64_t trainable = 0, total = 0;
  for (const auto& p : model.parameters()) {
    total += p.numel();
    if (p.requires_grad()) trainable += p.numel();
  }
  return "LoRA r " + std::to_string(lora.r) + ", alpha " + number(lora.lora_alpha) + " (scaling " +
         number(lora.scaling()) + (lora.use_rslora ? ", rsLoRA" : "") + ") on " + std::to_string(targets.size()) +
         " layers (" + kind_list + "): " + count_text(trainable) + " of " + count_text(total) + " parameters train";
}

}  // namespace

void load_training_adapter(model::Seq2SeqLMImpl& /*model*/, TrainingArguments& args) {
  throw std::invalid_argument("adapter_name_or_path '" + args.adapter_name_or_path +
                              "': this build cannot continue a PEFT adapter; train a new one with lora_r");
}

std::string prepare_lora(model::Seq2SeqLMImpl& model, TrainingArguments& args) {
  if (!args.trains_adapters()) return "";
  if (!args.adapter_name_or_path.empty()) {
    load_training_adapter(model, args);
  } else {
    model::apply_lora(model, args.lora, static_cast<std::uint64_t>(args.seed));
  }
  auto line = describe(model, args.lora);
  if (args.base_dtype == "bfloat16") {
    const auto saved = model::hold_frozen_linears_in_bfloat16(model);
    line += "; frozen Linear weights held in bfloat16 (" + util::format_bytes(static_cast<std::uint64_t>(saved)) +
            " saved)";
  }
  return line;
}

}  // namespace fitsum::train
