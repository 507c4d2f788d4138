// What a finished `fitsum train` left in its output folder, for tests that compare runs: the saved weights, the
// logged history, and the weights of two runs compared tensor by tensor.
#pragma once

#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fitsum/io/safetensors.h"
#include "fitsum/util/files.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {

inline std::map<std::string, torch::Tensor> saved_tensors(const fs::path& file) {
  io::SafetensorsReader reader(file);
  std::map<std::string, torch::Tensor> out;
  for (const auto& e : reader.entries()) out[e.name] = reader.read(e.name);
  return out;
}

inline std::map<std::string, torch::Tensor> saved_weights(const fs::path& model_dir) {
  return saved_tensors(model_dir / "model.safetensors");
}

// Every tensor within `relative` of the other (max abs difference / max abs value), k_proj biases excepted: their
// true gradient is zero, so what they get is rounding noise (see ../shared/fixtures/README.md).
inline void expect_same_weights(const fs::path& a, const fs::path& b, double relative) {
  const auto wa = saved_weights(a), wb = saved_weights(b);
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, t] : wa) {
    if (name.find("k_proj.bias") != std::string::npos) continue;
    EXPECT_CLOSE(wb.at(name), t, test::relative(relative)) << name << " differs between " << a << " and " << b;
  }
}

inline nlohmann::json log_history(const fs::path& out) {
  return util::read_json_file(out / "trainer_state.json")["log_history"];
}

}  // namespace fitsum::test
