// What a model folder may name: Hugging Face's cache layout (snapshots linking into blobs) loads; shard names in an
// index stay inside the folder (no "..", no absolute paths), and whatever a name resolves to must be a regular file
// (FIFOs, devices and folders are refused by name, without blocking or reading from them).
#include <sys/stat.h>

#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/io/checkpoint.h"
#include "fitsum/io/hf_config.h"
#include "fitsum/io/safetensors.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

fs::path tiny() { return shared_dir() / "fixtures" / "tiny-pegasus"; }

// A sharded copy of the tiny model: two safetensors shards and an index naming them.
fs::path sharded_copy(const std::string& name) {
  const auto dir = temp_dir(name);
  fs::copy_file(tiny() / "config.json", dir / "config.json");
  io::SafetensorsReader reader(tiny() / "model.safetensors");
  std::vector<std::pair<std::string, at::Tensor>> first, second;
  nlohmann::json map = nlohmann::json::object();
  for (std::size_t i = 0; i < reader.entries().size(); ++i) {
    const auto& e = reader.entries()[i];
    (i % 2 ? second : first).emplace_back(e.name, reader.read(e.name));
    map[e.name] = i % 2 ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
  }
  io::write_safetensors(dir / "model-00001-of-00002.safetensors", first);
  io::write_safetensors(dir / "model-00002-of-00002.safetensors", second);
  util::write_json_file_atomic(dir / "model.safetensors.index.json", {{"metadata", {}}, {"weight_map", map}});
  return dir;
}

void name_shard(const fs::path& dir, const std::string& shard) {
  auto index = util::read_json_file(dir / "model.safetensors.index.json");
  index["weight_map"]["final_logits_bias"] = shard;
  util::write_json_file_atomic(dir / "model.safetensors.index.json", index);
}

TEST(ModelFolder, TheHuggingFaceCacheLayoutLoads) {
  FITSUM_REQUIRE_SHARED();
  // hub/models--x/snapshots/<rev>/{config.json, model.safetensors} -> ../../blobs/<hash>
  const auto cache = temp_dir("hf-cache");
  fs::create_directories(cache / "blobs");
  fs::create_directories(cache / "snapshots" / "rev1");
  for (const char* file : {"config.json", "model.safetensors"}) {
    fs::copy_file(tiny() / file, cache / "blobs" / (std::string("hash-") + file));
    fs::create_symlink(fs::path("..") / ".." / "blobs" / (std::string("hash-") + file),
                       cache / "snapshots" / "rev1" / file);
  }
  auto folder = io::open_model_folder(cache / "snapshots" / "rev1");
  model::Seq2SeqLM m(folder.config);
  const auto report = io::load_weights(*m, folder);
  EXPECT_GT(report.tensors_loaded, 0);
}

TEST(ModelFolder, ShardNamesMustStayInsideTheFolder) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = sharded_copy("confined");
  EXPECT_NO_THROW(io::open_model_folder(dir));
  const std::vector<std::string> shards = {"../../etc/passwd",    "/etc/shadow", "sub/../../x.safetensors",
                                           "./model.safetensors", "a//b",        std::string("x\0y", 3),
                                           "dir\\..\\x"};
  for (const auto& shard : shards) {
    name_shard(dir, shard);
    const auto message = error_of([&] { io::open_model_folder(dir); });
    EXPECT_NE(message.find("an index may only name files inside its own folder"), std::string::npos)
        << shard << ": " << message;
    EXPECT_EQ(message.find("root:"), std::string::npos) << "file content leaked: " << message;
  }
}

TEST(ModelFolder, ShardsThatAreNotRegularFilesAreRefusedByName) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = sharded_copy("kinds");
  ASSERT_EQ(::mkfifo((dir / "fifo.safetensors").c_str(), 0600), 0);
  fs::create_directory(dir / "folder.safetensors");
  fs::create_symlink("/dev/zero", dir / "zero.safetensors");
  const std::vector<std::pair<std::string, std::string>> cases = {{"fifo.safetensors", "FIFO"},
                                                                  {"folder.safetensors", "is a folder"},
                                                                  {"zero.safetensors", "character device"},
                                                                  {"missing.safetensors", "does not exist"}};
  for (const auto& [shard, why] : cases) {
    name_shard(dir, shard);
    const auto message = error_of([&] { io::open_model_folder(dir); });
    EXPECT_NE(message.find("shard '" + shard + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(why), std::string::npos) << message;
  }
}

TEST(ModelFolder, AConfigOrWeightsFileThatIsNotARegularFileIsRefusedByName) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("fifo-config");
  ASSERT_EQ(::mkfifo((dir / "config.json").c_str(), 0600), 0);
  auto message = error_of([&] { io::open_model_folder(dir); });
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;
  EXPECT_NE(message.find("FIFO"), std::string::npos) << message;
  EXPECT_NE(error_of([&] { io::read_model_config(dir); }).find("FIFO"), std::string::npos);

  const auto weights = temp_dir("dir-weights");
  fs::copy_file(tiny() / "config.json", weights / "config.json");
  fs::create_directory(weights / "model.safetensors");
  message = error_of([&] { io::open_model_folder(weights); });
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("is a folder"), std::string::npos) << message;
}

TEST(ModelConfig, SizesPastAnyBuildableModelAreRefusedAndCountsNeverWrap) {
  nlohmann::json config = {{"model_type", "pegasus"},
                           {"vocab_size", 1000000000000000000LL},
                           {"d_model", 16},
                           {"encoder_attention_heads", 2},
                           {"decoder_attention_heads", 2}};
  const auto message = error_of([&] { io::model_config_from_hf(config, "config.json"); });
  EXPECT_NE(message.find("'vocab_size' is 1000000000000000000, more than"), std::string::npos) << message;
  // The largest configuration the bounds allow still counts without overflow.
  config = {{"model_type", "pegasus"},     {"vocab_size", 2147483647},
            {"d_model", 1 << 20},          {"encoder_layers", 10000},
            {"decoder_layers", 10000},     {"encoder_ffn_dim", 1 << 20},
            {"decoder_ffn_dim", 1 << 20},  {"max_position_embeddings", 1 << 24},
            {"tie_word_embeddings", false}};
  const auto counts = model::count_parameters(io::model_config_from_hf(config, "config.json"));
  EXPECT_GT(counts.trainable, 0);
  EXPECT_GT(counts.total(), counts.trainable);
  // vocab x d_model (untied: twice) + per layer 4 (encoder) or 8 (decoder) d^2 + 2 ffn d, all exactly.
  const std::int64_t d = 1 << 20, v = 2147483647, layers = 10000;
  EXPECT_EQ(counts.matrix_elements, 2 * v * d + layers * (4 * d * d + 2 * d * d) + layers * (8 * d * d + 2 * d * d));
}

TEST(ModelConfig, OverridesThatAreNotNumbersSayWhy) {
  nlohmann::json config = {{"model_type", "pegasus"}, {"dropout", 0.1}, {"d_model", 16}};
  auto message = error_of([&] { io::apply_config_overrides(config, "embedding_padding_idx=abc"); });
  EXPECT_NE(message.find("is not a decimal integer"), std::string::npos) << message;
  EXPECT_EQ(message.find("stoll"), std::string::npos) << message;
  message = error_of([&] { io::apply_config_overrides(config, "d_model=99999999999999999999"); });
  EXPECT_NE(message.find("out of range"), std::string::npos) << message;
  message = error_of([&] { io::apply_config_overrides(config, "dropout=1e999"); });
  EXPECT_NE(message.find("not finite"), std::string::npos) << message;
}

}  // namespace
}  // namespace fitsum::test
