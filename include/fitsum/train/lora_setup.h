// LoRA for a training run (model/lora.h): between loading the model and planning or training it, the adapters are
// added (lora_r > 0, PEFT's get_peft_model) or read from a PEFT adapter folder (adapter_name_or_path), which freezes
// the base; base_dtype bfloat16 then holds the frozen base's Linear weights in bfloat16. The Trainer then trains
// the trainable tensors alone (optim::trainable_parameters): the frozen base gets no gradient and no optimizer
// state.
#pragma once

#include <string>

#include "fitsum/model/seq2seq.h"
#include "fitsum/train/training_arguments.h"

namespace fitsum::train {

// Prepares `model` for args' LoRA settings and returns one line that says what trains ("LoRA r 16, alpha 32 (scaling
// 2) on 32 layers (v_proj, q_proj): 1.18M of 570M parameters train; frozen Linear weights held in bfloat16 (...)"). With
// adapter_name_or_path the adapter folder is read by load_training_adapter, which sets args.lora to its config.
// Throws std::invalid_argument for target modules the model does not have, std::runtime_error for a bad adapter
// folder. Nothing happens (and "" is returned) when args trains no adapters.
std::string prepare_lora(model::Seq2SeqLMImpl& model, TrainingArguments& args);

// The call point of --adapter_name_or_path: reads the PEFT adapter folder (adapter_config.json,
// adapter_model.safetensors) into `model`, adapters included, and sets args.lora to the folder's LoraConfig.
void load_training_adapter(model::Seq2SeqLMImpl& model, TrainingArguments& args);

}  // namespace fitsum::train
