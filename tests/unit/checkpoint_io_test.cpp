// Checkpoint IO: HF folders in every supported layout load into identical tensors, a save/load round trip is
// exact, and every kind of defect fails with a message that names the file or tensor.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fitsum/io/checkpoint.h"
#include "fitsum/io/hf_config.h"
#include "fitsum/io/safetensors.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/util/files.h"
#include "test_support.h"
#include "tolerance.h"

namespace fitsum::test {
namespace {

using io::open_model_folder;

model::Seq2SeqLM load(const fs::path& dir) {
  auto folder = open_model_folder(dir);
  model::Seq2SeqLM m(folder.config);
  io::load_weights(*m, folder);
  return m;
}

void expect_same_tensors(model::Seq2SeqLM& a, model::Seq2SeqLM& b) {
  auto ta = io::checkpoint_tensors(*a);
  auto tb = io::checkpoint_tensors(*b);
  ASSERT_EQ(ta.size(), tb.size());
  for (std::size_t i = 0; i < ta.size(); ++i) {
    ASSERT_EQ(ta[i].first, tb[i].first);
    EXPECT_TRUE(torch::equal(ta[i].second, tb[i].second)) << ta[i].first;
  }
}

// Copies a model folder's config.json and weights into a fresh temporary folder.
fs::path copy_folder(const fs::path& from, const std::string& name) {
  auto dir = temp_dir(name);
  for (const auto& entry : fs::directory_iterator(from)) {
    fs::copy_file(entry.path(), dir / entry.path().filename());
  }
  return dir;
}

TEST(CheckpointIO, LoadsHuggingFaceSavedTinyPegasusWithoutLmHead) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = shared_dir() / "data" / "pegasus-tiny";
  auto folder = open_model_folder(dir);
  EXPECT_EQ(folder.config.vocab_size, 5103);
  io::SafetensorsReader reader(dir / "model.safetensors");
  EXPECT_FALSE(reader.contains("lm_head.weight"));
  model::Seq2SeqLM m(folder.config);
  const auto report = io::load_weights(*m, folder);
  EXPECT_EQ(report.tensors_loaded, 92);
  EXPECT_TRUE(report.computed.empty());
  EXPECT_TRUE(torch::equal(m->model->shared->weight, reader.read("model.shared.weight")));
  EXPECT_TRUE(torch::equal(m->lm_head_weight(), reader.read("model.shared.weight")));
}

TEST(CheckpointIO, TiedCopiesInTheFileAreAcceptedAndShared) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = shared_dir() / "fixtures" / "tiny-pegasus";
  auto m = load(dir);
  auto folder = open_model_folder(dir);
  model::Seq2SeqLM fresh(folder.config);
  const auto report = io::load_weights(*fresh, folder);
  EXPECT_EQ(report.tied_duplicates.size(), 3u);
  EXPECT_TRUE(report.warnings.empty());
}

TEST(CheckpointIO, SinusoidalTablesAndLogitBiasAreComputedWhenAbsent) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = copy_folder(shared_dir() / "fixtures" / "tiny-pegasus", "absent");
  io::SafetensorsReader original(dir / "model.safetensors");
  const auto stored_table = original.read("model.encoder.embed_positions.weight");
  std::vector<std::pair<std::string, at::Tensor>> kept;
  for (const auto& e : original.entries()) {
    if (e.name.find("embed_positions") == std::string::npos && e.name != "final_logits_bias") {
      kept.emplace_back(e.name, original.read(e.name));
    }
  }
  io::write_safetensors(dir / "model.safetensors", kept);
  auto folder = open_model_folder(dir);
  model::Seq2SeqLM m(folder.config);
  const auto report = io::load_weights(*m, folder);
  EXPECT_EQ(report.computed.size(), 3u);
  // The computed table equals the one HF stored (float32 rounding of the same double-precision values).
  EXPECT_CLOSE(m->model->encoder->embed_positions->weight, stored_table, relative(1e-6));
  EXPECT_EQ(m->final_logits_bias.abs().sum().item<double>(), 0.0);
}

TEST(CheckpointIO, RoundTripIsExactForBothCheckpoints) {
  FITSUM_REQUIRE_SHARED();
  for (const auto& dir : {shared_dir() / "fixtures" / "tiny-pegasus", shared_dir() / "data" / "pegasus-tiny"}) {
    auto first = load(dir);
    const auto out = temp_dir("roundtrip-" + dir.filename().string());
    auto folder = open_model_folder(dir);
    io::save_model_folder(*first, out, {folder.config_json, {}, dir});
    auto second = load(out);
    expect_same_tensors(first, second);
    // HF's save_pretrained layout: no tied duplicates, buffers kept.
    io::SafetensorsReader saved(out / "model.safetensors");
    EXPECT_FALSE(saved.contains("lm_head.weight"));
    EXPECT_FALSE(saved.contains("model.encoder.embed_tokens.weight"));
    EXPECT_TRUE(saved.contains("final_logits_bias"));
    EXPECT_TRUE(saved.contains("model.decoder.embed_positions.weight"));
    EXPECT_EQ(saved.metadata().at("format"), "pt");
    // Config fields survive, generation settings are written, tokenizer files travel along.
    const auto config = util::read_json_file(out / "config.json");
    EXPECT_EQ(config["vocab_size"], folder.config.vocab_size);
    EXPECT_EQ(config.value("_name_or_path", nlohmann::json()),
              folder.config_json.value("_name_or_path", nlohmann::json()));
    EXPECT_TRUE(fs::exists(out / "generation_config.json"));
    EXPECT_EQ(fs::exists(out / "spiece.model"), fs::exists(dir / "spiece.model"));
  }
}

TEST(CheckpointIO, SavedPegasusTinyHasExactlyHuggingFacesKeys) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = shared_dir() / "data" / "pegasus-tiny";
  auto m = load(dir);
  const auto out = temp_dir("keys");
  io::save_model_folder(*m, out);
  io::SafetensorsReader hf(dir / "model.safetensors");
  io::SafetensorsReader ours(out / "model.safetensors");
  std::set<std::string> a, b;
  for (const auto& e : hf.entries()) a.insert(e.name);
  for (const auto& e : ours.entries()) b.insert(e.name);
  EXPECT_EQ(a, b);
}

TEST(CheckpointIO, PytorchModelBinLoadsTheSameWeights) {
  FITSUM_REQUIRE_SHARED();
  auto from_bin = load(source_dir() / "tests" / "data" / "fixtures" / "tiny-pegasus-bin");
  auto from_safetensors = load(shared_dir() / "fixtures" / "tiny-pegasus");
  expect_same_tensors(from_bin, from_safetensors);
}

TEST(CheckpointIO, HalfPrecisionWeightsAreConverted) {
  FITSUM_REQUIRE_SHARED();
  auto reference = load(shared_dir() / "fixtures" / "tiny-pegasus");
  for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
    const auto dir = temp_dir(std::string("half-") + c10::toString(dtype));
    fs::copy_file(shared_dir() / "fixtures" / "tiny-pegasus" / "config.json", dir / "config.json");
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (auto& [name, t] : io::checkpoint_tensors(*reference)) tensors.emplace_back(name, t.to(dtype));
    io::write_safetensors(dir / "model.safetensors", tensors);
    auto loaded = load(dir);
    for (auto& [name, t] : io::checkpoint_tensors(*loaded)) {
      EXPECT_EQ(t.scalar_type(), torch::kFloat);
      auto expected = reference->named_parameters().contains(name) ? reference->named_parameters()[name]
                                                                   : reference->named_buffers()[name];
      EXPECT_TRUE(torch::equal(t, expected.to(dtype).to(torch::kFloat))) << name;
    }
  }
}

TEST(CheckpointIO, ShardedSafetensorsLoad) {
  FITSUM_REQUIRE_SHARED();
  auto reference = load(shared_dir() / "fixtures" / "tiny-pegasus");
  const auto dir = temp_dir("sharded");
  fs::copy_file(shared_dir() / "fixtures" / "tiny-pegasus" / "config.json", dir / "config.json");
  auto tensors = io::checkpoint_tensors(*reference);
  const auto half = tensors.size() / 2;
  std::vector<std::pair<std::string, at::Tensor>> a(tensors.begin(), tensors.begin() + half);
  std::vector<std::pair<std::string, at::Tensor>> b(tensors.begin() + half, tensors.end());
  io::write_safetensors(dir / "model-00001-of-00002.safetensors", a);
  io::write_safetensors(dir / "model-00002-of-00002.safetensors", b);
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (const auto& [name, t] : a) index["weight_map"][name] = "model-00001-of-00002.safetensors";
  for (const auto& [name, t] : b) index["weight_map"][name] = "model-00002-of-00002.safetensors";
  util::write_json_file_atomic(dir / "model.safetensors.index.json", index);
  auto loaded = load(dir);
  expect_same_tensors(reference, loaded);

  fs::remove(dir / "model-00002-of-00002.safetensors");
  const auto message = error_of([&] { open_model_folder(dir); });
  EXPECT_NE(message.find("model-00002-of-00002.safetensors"), std::string::npos) << message;
}

TEST(CheckpointIO, BaseModelCheckpointWithoutPrefixLoads) {
  FITSUM_REQUIRE_SHARED();
  auto reference = load(shared_dir() / "fixtures" / "tiny-pegasus");
  const auto dir = temp_dir("base");
  fs::copy_file(shared_dir() / "fixtures" / "tiny-pegasus" / "config.json", dir / "config.json");
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& [name, t] : io::checkpoint_tensors(*reference)) {
    tensors.emplace_back(name.rfind("model.", 0) == 0 ? name.substr(6) : name, t);
  }
  io::write_safetensors(dir / "model.safetensors", tensors);
  auto loaded = load(dir);
  expect_same_tensors(reference, loaded);
}

class CorruptCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(shared_dir() / "fixtures")) GTEST_SKIP() << "no reference material";
    dir_ = copy_folder(shared_dir() / "fixtures" / "tiny-pegasus", "corrupt");
    file_ = dir_ / "model.safetensors";
  }
  std::string load_error() {
    return error_of([&] { load(dir_); });
  }
  fs::path dir_, file_;
};

TEST_F(CorruptCheckpoint, TruncatedFile) {
  const auto bytes = util::read_file(file_);
  write_bytes(file_, bytes.substr(0, bytes.size() - 1000));
  const auto message = load_error();
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("past the end"), std::string::npos) << message;
}

TEST_F(CorruptCheckpoint, TruncatedInsideTheHeader) {
  write_bytes(file_, util::read_file(file_).substr(0, 100));
  EXPECT_NE(load_error().find("header length"), std::string::npos) << load_error();
}

TEST_F(CorruptCheckpoint, ShorterThanTheLengthPrefix) {
  write_bytes(file_, "abc");
  EXPECT_NE(load_error().find("fewer than the 8-byte header length"), std::string::npos) << load_error();
}

TEST_F(CorruptCheckpoint, HugeHeaderLength) {
  std::string bytes = util::read_file(file_);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(0xff);
  write_bytes(file_, bytes);
  EXPECT_NE(load_error().find("exceeds"), std::string::npos) << load_error();
}

TEST_F(CorruptCheckpoint, OffsetsPastTheEnd) {
  edit_safetensors_header(file_, [](nlohmann::json& h) { h["model.shared.weight"]["data_offsets"][1] = 1ULL << 40; });
  const auto message = load_error();
  EXPECT_NE(message.find("model.shared.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("past the end of the data area"), std::string::npos) << message;
}

TEST_F(CorruptCheckpoint, OffsetsInconsistentWithShape) {
  edit_safetensors_header(file_, [](nlohmann::json& h) { h["final_logits_bias"]["shape"] = {1, 166}; });
  const auto message = load_error();
  EXPECT_NE(message.find("final_logits_bias"), std::string::npos) << message;
  EXPECT_NE(message.find("needs"), std::string::npos) << message;
}

TEST_F(CorruptCheckpoint, OverflowingShape) {
  edit_safetensors_header(file_, [](nlohmann::json& h) { h["final_logits_bias"]["shape"] = {1ULL << 40, 1ULL << 40}; });
  EXPECT_NE(load_error().find("overflow"), std::string::npos) << load_error();
}

TEST_F(CorruptCheckpoint, OverlappingTensors) {
  edit_safetensors_header(file_, [](nlohmann::json& h) {
    auto offsets = h["final_logits_bias"]["data_offsets"];
    h["lm_head.weight"]["data_offsets"] = h["model.shared.weight"]["data_offsets"];
  });
  EXPECT_NE(load_error().find("overlapping or missing data"), std::string::npos) << load_error();
}

TEST_F(CorruptCheckpoint, HeaderIsNotJson) {
  std::string bytes = util::read_file(file_);
  bytes[8] = '#';
  write_bytes(file_, bytes);
  EXPECT_NE(load_error().find("not valid JSON"), std::string::npos) << load_error();
}

TEST_F(CorruptCheckpoint, WrongShapeInConfig) {
  auto config = util::read_json_file(dir_ / "config.json");
  config["vocab_size"] = 168;
  util::write_json_file_atomic(dir_ / "config.json", config);
  const auto message = load_error();
  EXPECT_NE(message.find("'model.shared.weight' has shape [167, 32]"), std::string::npos) << message;
  EXPECT_NE(message.find("expected [168, 32]"), std::string::npos) << message;
}

TEST_F(CorruptCheckpoint, MissingAndUnexpectedTensorsAreNamed) {
  io::SafetensorsReader reader(file_);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& e : reader.entries()) {
    if (e.name != "model.decoder.layers.1.fc2.bias") tensors.emplace_back(e.name, reader.read(e.name));
  }
  tensors.emplace_back("model.decoder.layers.7.fc2.bias", torch::zeros({32}));
  io::write_safetensors(file_, tensors);
  const auto message = load_error();
  EXPECT_NE(message.find("missing tensor 'model.decoder.layers.1.fc2.bias' (shape [32])"), std::string::npos)
      << message;
  EXPECT_NE(message.find("unexpected tensor 'model.decoder.layers.7.fc2.bias'"), std::string::npos) << message;
}

TEST_F(CorruptCheckpoint, IntegerWeightsAreRejected) {
  io::SafetensorsReader reader(file_);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& e : reader.entries()) {
    auto t = reader.read(e.name);
    tensors.emplace_back(e.name, e.name == "final_logits_bias" ? t.to(torch::kLong) : t);
  }
  io::write_safetensors(file_, tensors);
  EXPECT_NE(load_error().find("'final_logits_bias' has dtype I64"), std::string::npos) << load_error();
}

TEST(HfConfig, RejectsWhatTheModelCannotHonour) {
  nlohmann::json base = {{"model_type", "pegasus"},      {"vocab_size", 100},    {"d_model", 16},
                         {"encoder_layers", 1},          {"decoder_layers", 1},  {"encoder_attention_heads", 2},
                         {"decoder_attention_heads", 2}, {"encoder_ffn_dim", 8}, {"decoder_ffn_dim", 8}};
  EXPECT_NO_THROW(io::model_config_from_hf(base, "c.json"));
  auto with = [&](const char* key, nlohmann::json value) {
    auto j = base;
    j[key] = value;
    return error_of([&] { io::model_config_from_hf(j, "c.json"); });
  };
  EXPECT_NE(with("model_type", "marian").find("'model_type'"), std::string::npos);
  EXPECT_NE(with("activation_function", "mish").find("'activation_function'"), std::string::npos);
  EXPECT_NE(with("encoder_attention_heads", 3).find("'encoder_attention_heads'"), std::string::npos);
  EXPECT_NE(with("encoder_layerdrop", 0.1).find("'encoder_layerdrop'"), std::string::npos);
  EXPECT_NE(with("dropout", "high").find("'dropout'"), std::string::npos);
  EXPECT_NE(with("d_model", 0).find("'d_model'"), std::string::npos);
  EXPECT_NE(with("pad_token_id", 100).find("'pad_token_id'"), std::string::npos);
  EXPECT_NE(with("vocab_size", 1.5).find("'vocab_size'"), std::string::npos);
}

TEST(HfConfig, DefaultsAreThoseOfPegasusConfig) {
  const auto c = io::model_config_from_hf({{"model_type", "pegasus"}}, "c.json");
  EXPECT_EQ(c.vocab_size, 50265);
  EXPECT_EQ(c.d_model, 1024);
  EXPECT_EQ(c.encoder_layers, 12);
  EXPECT_EQ(c.activation_function, model::Activation::gelu);
  EXPECT_FALSE(c.scale_embedding);
  EXPECT_DOUBLE_EQ(c.dropout, 0.1);
}

TEST(ParameterCounts, MatchTheBuiltModel) {
  FITSUM_REQUIRE_SHARED();
  for (const auto& dir : {shared_dir() / "fixtures" / "tiny-pegasus", shared_dir() / "data" / "pegasus-tiny",
                          source_dir() / "tests" / "data" / "fixtures" / "odd-pegasus"}) {
    auto config = io::read_model_config(dir);
    for (bool tied : {true, false}) {
      config.tie_word_embeddings = tied;
      model::Seq2SeqLM m(config);
      std::int64_t trainable = 0, frozen = 0, matrix_rc = 0, vectors = 0;
      for (const auto& p : m->parameters()) {
        trainable += p.numel();
        if (p.dim() >= 2)
          matrix_rc += p.size(0) + p.size(1);
        else
          vectors += p.numel();
      }
      for (const auto& b : m->buffers()) frozen += b.numel();
      const auto counts = model::count_parameters(config);
      EXPECT_EQ(counts.trainable, trainable) << dir;
      EXPECT_EQ(counts.frozen, frozen) << dir;
      EXPECT_EQ(counts.matrix_rows_plus_cols, matrix_rc) << dir;
      EXPECT_EQ(counts.vector_elements, vectors) << dir;
    }
  }
}

TEST(ParameterCounts, PegasusLargeHas568699904TrainableParameters) {
  FITSUM_REQUIRE_SHARED();
  const auto counts = model::count_parameters(io::read_model_config(shared_dir() / "data" / "pegasus"));
  EXPECT_EQ(counts.trainable, 568699904);
  EXPECT_EQ(counts.frozen, 96103 + 2 * 1024 * 1024);
}

}  // namespace
}  // namespace fitsum::test
