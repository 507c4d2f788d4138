// Implements include/fitsum/train/diagnostics.h.
#include "fitsum/train/diagnostics.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include <torch/torch.h>

#include "fitsum/memory/static_memory.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/util/bytes.h"

namespace fitsum::train {

// Explains an out-of-memory error with what held the memory and which knobs would help.
std::string out_of_memory_advice(const std::string& what, const model::ModelConfig& config,
                                 const TrainingArguments& args, const memory::MemorySnapshot& memory) {
  const auto counts = model::count_parameters(config);
  const auto kind = args.optimizer();
  const auto fixed = memory::static_training_memory(counts, kind, memory::StorageDtype::fp32);
  const auto peak = static_cast<std::uint64_t>(std::max<std::int64_t>(memory.peak_bytes, 0));
  const auto rest = peak > fixed.total() ? peak - fixed.total() : 0;
  std::ostringstream out;
  out << "out of memory while training: " << what << "\n"
      << "  what held the memory (peak " << util::format_bytes(peak) << "):\n"
      << "    weights          " << util::format_bytes(fixed.weights) << "\n"
      << "    gradients        " << util::format_bytes(fixed.gradients) << "\n"
      << "    optimizer state  " << util::format_bytes(fixed.optimizer_state) << " (" << optim::to_string(kind) << ")\n"
      << "    the rest         " << util::format_bytes(rest)
      << " (activations, logits, temporary buffers of the micro-batch)\n"
      << "  knobs that would help:";
  if (!args.gradient_checkpointing) out << "\n    gradient_checkpointing (recompute activations in backward)";
  if (args.per_device_train_batch_size > 1) {
    out << "\n    per_device_train_batch_size " << args.per_device_train_batch_size / 2
        << " gradient_accumulation_steps " << args.gradient_accumulation_steps * 2 << " (same effective batch)";
  }
  if (kind == optim::OptimizerType::adamw_torch)
    out << "\n    optim adafactor (factored second moments, no first moment)";
  if (!args.bf16) out << "\n    bf16 (smaller activations)";
  out << "\n    a shorter max_source_length";
  return out.str();
}

// A diverged step (NaN or infinite loss or gradient norm) ends the run instead of training on into a NaN model;
// the error names the step and the first parameter that is no longer finite.
void stop_on_non_finite(std::int64_t step, double loss, double grad_norm, model::Seq2SeqLMImpl& model) {
  std::string tensor = "none yet";
  for (const auto& p : model.named_parameters()) {
    if (!torch::isfinite(p.value()).all().item<bool>()) {
      tensor = "'" + p.key() + "'";
      break;
    }
  }
  throw std::runtime_error("training diverged at step " + std::to_string(step) + ": loss " + std::to_string(loss) +
                           ", gradient norm " + std::to_string(grad_norm) + "; first non-finite weight: " + tensor +
                           "; lower learning_rate, check the data, or resume from an earlier checkpoint");
}

}  // namespace fitsum::train
