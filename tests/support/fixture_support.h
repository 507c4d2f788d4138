// Reading the reference fixtures (../shared/fixtures/README.md): case.json and sampled-tensor comparisons.
#pragma once

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fitsum/io/checkpoint.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/train/evaluation.h"
#include "fitsum/util/files.h"

namespace fitsum::test {

inline torch::Tensor long_tensor(const nlohmann::json& rows) {
  std::vector<std::int64_t> flat;
  const auto height = static_cast<std::int64_t>(rows.size());
  const auto width = static_cast<std::int64_t>(rows[0].size());
  for (const auto& row : rows) {
    for (const auto& v : row) flat.push_back(v.get<std::int64_t>());
  }
  return torch::tensor(flat, torch::kLong).view({height, width});
}

// Loads a fixture folder. `reference_embedding`: look embeddings up without padding_idx, as the plain reference
// that computed case.json does (see tests/data/make_hf_padding_case.py).
inline model::Seq2SeqLM load_fixture_model(const std::filesystem::path& dir, bool reference_embedding) {
  auto folder = io::open_model_folder(dir);
  auto config = folder.config;
  if (reference_embedding) config.embedding_padding_idx = -1;
  model::Seq2SeqLM model(config);
  io::load_weights(*model, folder);
  return model;
}

// The decoding defaults fitsum's commands start from for a model folder (train::model_generation_defaults).
inline generate::GenerationOptions folder_generation_defaults(const std::filesystem::path& dir) {
  return train::model_generation_defaults(util::read_json_file(dir / "config.json"), dir.string(), "");
}

// Every sampled entry within `tolerance` absolute.
inline void expect_samples_near(const torch::Tensor& tensor, const nlohmann::json& expected, double tolerance,
                                const std::string& what) {
  auto flat = tensor.detach().reshape({-1}).to(torch::kDouble);
  const auto& index = expected.at("index");
  const auto& value = expected.at("value");
  ASSERT_EQ(index.size(), value.size());
  for (std::size_t i = 0; i < index.size(); ++i) {
    const auto at = index[i].get<std::int64_t>();
    EXPECT_NEAR(flat[at].item<double>(), value[i].get<double>(), tolerance) << what << " at flat index " << at;
  }
  if (expected.contains("l2")) {
    // The whole tensor's norm, at the bound the per-entry tolerance implies for all of it: tolerance * sqrt(numel).
    const double l2 = expected.at("l2").get<double>();
    EXPECT_NEAR(flat.norm().item<double>(), l2, tolerance * std::sqrt(static_cast<double>(flat.numel())))
        << what << " l2 norm";
  }
}

// Tolerance for gradient and parameter samples: 1e-4 x the tensor's RMS (l2 / sqrt(numel)).
inline double rms_tolerance(const nlohmann::json& expected, std::int64_t numel) {
  return 1e-4 * expected.at("l2").get<double>() / std::sqrt(static_cast<double>(numel));
}

// After a backward pass of `model` on a fixture case: every parameter the case samples has a gradient whose samples
// are within rms_tolerance of the case's, and the global L2 norm of all gradients is within 1e-5 relative of the
// case's "grad_global_l2".
inline void expect_gradients_match_case(model::Seq2SeqLMImpl& model, const nlohmann::json& c) {
  auto params = model.named_parameters();
  for (const auto& item : c["grads"].items()) {
    ASSERT_TRUE(params.contains(item.key())) << item.key();
    const auto& grad = params[item.key()].grad();
    ASSERT_TRUE(grad.defined()) << item.key();
    expect_samples_near(grad, item.value(), rms_tolerance(item.value(), grad.numel()), "grad of " + item.key());
  }
  double sum_sq = 0.0;
  for (const auto& p : model.parameters()) {
    if (p.grad().defined()) sum_sq += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
  }
  const double expected = c["grad_global_l2"].get<double>();
  EXPECT_LE(std::abs(std::sqrt(sum_sq) - expected), 1e-5 * std::abs(expected))
      << "global gradient L2 " << std::sqrt(sum_sq) << " against " << expected;
}

}  // namespace fitsum::test
