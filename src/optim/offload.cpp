// Implements include/fitsum/optim/offload.h.
#include "fitsum/optim/offload.h"

#include <stdexcept>

namespace fitsum::optim {

namespace {

// The value of "device" in DeepSpeed's {"device": "cpu"}, spaces allowed; empty when `text` is not that form.
std::string object_form_device(const std::string& text) {
  std::string compact;
  for (const char c : text) {
    if (c != ' ' && c != '\t' && c != '\n') compact += c;
  }
  const std::string head = "{\"device\":\"";
  const std::string tail = "\"}";
  if (compact.size() <= head.size() + tail.size() || compact.compare(0, head.size(), head) != 0 ||
      compact.compare(compact.size() - tail.size(), tail.size(), tail) != 0) {
    return {};
  }
  return compact.substr(head.size(), compact.size() - head.size() - tail.size());
}

}  // namespace

OffloadDevice parse_offload_device(const std::string& text, const char* field) {
  const auto object_device = object_form_device(text);
  const std::string& name = object_device.empty() ? text : object_device;
  if (name == "none") return OffloadDevice::none;
  if (name == "cpu") return OffloadDevice::cpu;
  throw std::invalid_argument(std::string(field) + " '" + text +
                              "' is not one of none, cpu (the optimizer's state and update on the host)");
}

const char* to_string(OffloadDevice device) { return device == OffloadDevice::cpu ? "cpu" : "none"; }

}  // namespace fitsum::optim
