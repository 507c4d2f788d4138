// Where the optimizer keeps its state and runs its update (`--offload_optimizer`, DeepSpeed's
// offload_optimizer.device): on the training device, or on the host (ZeRO-Offload's idea: the state and the update
// in host memory, the device keeps the weights and their gradients; train/optimizer_offload.h moves them).
#pragma once

#include <string>

namespace fitsum::optim {

enum class OffloadDevice { none, cpu };

// "none" or "cpu"; also DeepSpeed's object form {"device": "cpu"} as JSON text (what an args JSON file's
// "offload_optimizer": {"device": "cpu"} becomes). Throws std::invalid_argument naming `field` and the choices.
OffloadDevice parse_offload_device(const std::string& text, const char* field = "offload_optimizer");
const char* to_string(OffloadDevice device);

}  // namespace fitsum::optim
