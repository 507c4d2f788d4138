// A layer fixture written by one of tests/data/make_*_fixtures.py (tests/data/fixtures/<name>/reference.safetensors):
// transformers' parameters, inputs, outputs and gradients of one block, read by name, and the comparisons the layer
// parity tests make against it (each difference relative to the reference's magnitude, the worst printed so that
// the margin under the bound is on record).
#pragma once

#include <algorithm>
#include <iostream>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fitsum/io/safetensors.h"
#include "tolerance.h"

namespace fitsum::test {

class LayerReference {
 public:
  // `label` prefixes the printed margins ("pegasus-x"); `bound` is the relative bound of every comparison.
  LayerReference(const std::filesystem::path& file, std::string label, double bound)
      : reader_(file), label_(std::move(label)), bound_(bound) {}

  torch::Tensor hf(const std::string& name) const { return reader_.read(name, torch::kFloat); }
  torch::Tensor ids(const std::string& name) const { return reader_.read(name).to(torch::kLong); }
  const io::SafetensorsReader& reader() const { return reader_; }
  const std::string& label() const { return label_; }
  double bound() const { return bound_; }

  // Copies the fixture's tensors into `module` by name: every parameter must be in the fixture under `prefix`, and
  // the fixture must hold no parameter of that prefix (a name ending in .weight or .bias, not a gradient) that the
  // module lacks.
  void load_by_name(torch::nn::Module& module, const std::string& prefix) const {
    torch::NoGradGuard no_grad;
    const auto params = module.named_parameters();
    for (const auto& p : params) {
      ASSERT_TRUE(reader_.contains(prefix + p.key())) << prefix + p.key() << " is not a transformers key";
      p.value().copy_(hf(prefix + p.key()));
    }
    const auto& entries = reader_.entries();
    const auto theirs = std::count_if(entries.begin(), entries.end(),
                                      [&](const io::SafetensorsEntry& e) { return is_parameter(e.name, prefix); });
    EXPECT_EQ(static_cast<std::size_t>(theirs), params.size()) << "parameters under " << prefix;
  }

 private:
  static bool is_parameter(const std::string& name, const std::string& prefix) {
    const auto ends_with = [&](const std::string& tail) {
      return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    return name.rfind(prefix, 0) == 0 && name.find(".grad") == std::string::npos &&
           (ends_with(".weight") || ends_with(".bias"));
  }

  io::SafetensorsReader reader_;
  std::string label_;
  double bound_;
};

// The largest |got - want| relative to max |want|.
inline double worst_relative(const torch::Tensor& got, const torch::Tensor& want) {
  const auto scale = want.abs().max().item<double>();
  return (got.to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>() / std::max(scale, 1e-30);
}

// Tensors checked against the fixture's, each within the bound; report() prints the worst difference seen.
struct Comparison {
  const LayerReference& reference;
  double worst = 0.0;

  void expect(const torch::Tensor& got, const std::string& name) {
    ASSERT_TRUE(got.defined()) << name << ": no value (no gradient reached it)";
    const auto want = reference.hf(name);
    EXPECT_CLOSE(got, want, relative(reference.bound())) << name;
    if (got.sizes() == want.sizes()) worst = std::max(worst, worst_relative(got, want));
  }
  void report(const std::string& what) const {
    std::cout << "[ " << reference.label() << " ] " << what << ": worst relative difference " << worst << " (bound "
              << reference.bound() << ")\n";
  }
};

}  // namespace fitsum::test
