// What low-rank adapters (model/lora.h) change in the planner's static terms, and the LoRA configurations the
// planner names when full fine-tuning cannot fit.
//
// With adapters the base is frozen: its weights are stored (float32, or bfloat16 for the stacks' frozen Linear
// weights with --base_dtype bfloat16) but have no gradient and no optimizer state; the adapters' A and B, the
// biases LoraConfig::bias trains and the parameters of modules_to_save are float32 with a gradient and the
// optimizer's state each (AdamW two moments, Adafactor a factored second moment for matrices). Which layers are
// targeted and what apply_lora makes trainable is the model's business, so nothing here names a module: the counts
// come from a reduced-depth copy with the adapters applied as the run applies them, extrapolated to the full depth
// layer by layer. What the activations change (a frozen layer keeps only what its input's gradient needs, an adapter
// keeps its rank-r intermediate) is measured by the calibration probe on the same copies (calibration.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fitsum/model/config.h"
#include "fitsum/model/lora.h"

namespace fitsum::model {
class Seq2SeqLMImpl;
}

namespace fitsum::memory {

// The full-depth model's parameters with adapters: `counts.trainable` (and its per-tensor list, for ZeRO and
// Adafactor) are the tensors that train, `counts.frozen` the base's weights and buffers; `weight_bytes` what they
// take as stored.
struct LoraMemory {
  model::ParameterCounts counts;
  std::uint64_t weight_bytes = 0;
};

// Applies `lora` to a model as a training run does (model::apply_lora, then with `base_bfloat16`
// model::hold_frozen_linears_in_bfloat16). The adapters' initial values do not matter to memory.
void apply_planned_lora(model::Seq2SeqLMImpl& model, const model::LoraConfig& lora, bool base_bfloat16);

// The counts of a model of `config` from `copy`, a copy of it with 2 encoder and 2 decoder layers to which the
// adapters were applied (apply_planned_lora): the copy's tensors outside the stacks' layers once, its layer 0 of each
// stack once (T5's layer 0 alone holds the position bias) and its layer 1 for every further layer of the stack.
LoraMemory lora_memory(model::Seq2SeqLMImpl& copy, const model::ModelConfig& config);

// The same from the config alone: builds the 2 + 2 copy on the CPU (seconds at flan-t5-xl's widths).
LoraMemory lora_memory(const model::ModelConfig& config, const model::LoraConfig& lora, bool base_bfloat16);

// The flags that select `lora` in fitsum's (and PEFT's) names, those at their defaults left out:
// "--lora_r 16 --lora_target_modules all-linear --base_dtype bfloat16".
std::string lora_arguments(const model::LoraConfig& lora, bool base_bfloat16);

// A LoRA configuration the planner may name.
struct LoraRung {
  model::LoraConfig lora;
  bool base_bfloat16 = false;
};

// What the planner tries, in order, when full fine-tuning cannot fit (it never switches to LoRA itself: adapters
// change what is learned): r 16 on every Linear ("all-linear"), the same with the frozen base in bfloat16, then r 8
// on the family's default targets (q_proj, v_proj / q, v) with the base in bfloat16.
std::vector<LoraRung> lora_suggestion_ladder();

}  // namespace fitsum::memory
