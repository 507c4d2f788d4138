// What the trainer says when a run cannot go on: an out-of-memory error explained with what held the memory and
// which knobs would help, and a diverged step (NaN or infinite loss) named with the first non-finite weight.
#pragma once

#include <cstdint>
#include <string>

#include "fitsum/memory/device_memory.h"
#include "fitsum/model/config.h"
#include "fitsum/train/training_arguments.h"

namespace fitsum::model {
class Seq2SeqLMImpl;
}

namespace fitsum::train {

// The message for an out-of-memory error `what` while training.
std::string out_of_memory_advice(const std::string& what, const model::ModelConfig& config,
                                 const TrainingArguments& args, const memory::MemorySnapshot& memory);

// Throws std::runtime_error: training diverged at `step` (loss, gradient norm, first non-finite parameter).
[[noreturn]] void stop_on_non_finite(std::int64_t step, double loss, double grad_norm, model::Seq2SeqLMImpl& model);

}  // namespace fitsum::train
