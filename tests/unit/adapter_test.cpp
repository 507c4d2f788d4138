// LoRA adapter folders (io/adapter.h) against the adapters PEFT itself wrote (tests/data/fixtures/lora-bart*, made by
// tests/data/make_lora_fixtures.py): they load and compute PEFT's logits, fitsum writes them back byte for byte,
// a save and load is bit-exact, and every damaged or mismatched file is one error naming the file and the tensor or
// field.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fitsum/io/adapter.h"
#include "fitsum/io/model_loader.h"
#include "fitsum/io/safetensors.h"
#include "fitsum/model/lora.h"
#include "fitsum/model/seq2seq.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

fs::path fixtures() { return source_dir() / "tests" / "data" / "fixtures"; }

model::Seq2SeqLM tiny_bart() {
  io::ModelSource source;
  source.model_name_or_path = (fixtures() / "tiny-bart").string();
  auto loaded = io::load_model(source, 0);
  loaded.model->eval();
  return loaded.model;
}

torch::Tensor long_tensor(const nlohmann::json& rows) {
  std::vector<std::int64_t> flat;
  for (const auto& row : rows) {
    for (const auto& v : row) flat.push_back(v.get<std::int64_t>());
  }
  return torch::tensor(flat, torch::kLong).view({static_cast<std::int64_t>(rows.size()), -1});
}

// The logits of expected.json's input (its decoder inputs are the labels shifted right).
torch::Tensor fixture_logits(model::Seq2SeqLMImpl& m, const nlohmann::json& expected) {
  const auto ids = long_tensor(expected["input_ids"]);
  const auto decoder = long_tensor(expected["decoder_input_ids"]);
  auto labels = torch::cat({decoder.slice(1, 1), torch::full({1, 1}, 2, torch::kLong)}, 1);
  torch::NoGradGuard no_grad;
  return m.forward(ids, torch::ones_like(ids), labels).logits[0];
}

torch::Tensor matrix(const nlohmann::json& rows) {
  std::vector<float> flat;
  for (const auto& row : rows) {
    for (const auto& v : row) flat.push_back(v.get<float>());
  }
  return torch::tensor(flat).view({static_cast<std::int64_t>(rows.size()), -1});
}

std::string text_of(const fs::path& file) { return util::read_file(file); }

TEST(Adapter, APeftWrittenAdapterLoadsAndComputesPeftsLogits) {
  for (const char* name : {"lora-bart", "lora-bart-bin"}) {
    SCOPED_TRACE(name);
    const auto folder = io::open_adapter_folder(fixtures() / name);
    auto m = tiny_bart();
    const auto expected = util::read_json_file(fixtures() / name / "expected.json");
    ASSERT_TRUE(torch::allclose(fixture_logits(*m, expected), matrix(expected["base_logits"]), 1e-5, 1e-5));
    io::load_adapter(*m, folder);
    m->eval();
    const auto want = matrix(expected["adapter_logits"]);
    const auto got = fixture_logits(*m, expected);
    EXPECT_GT((want - matrix(expected["base_logits"])).abs().max().item<double>(), 1e-2);  // the adapter matters
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max().item<double>();
  }
}

TEST(Adapter, TheConfigOfAPeftAdapterIsReadAsPeftWroteIt) {
  const auto a = io::open_adapter_folder(fixtures() / "lora-bart");
  EXPECT_EQ(a.config.r, 4);
  EXPECT_EQ(a.config.lora_alpha, 16.0);
  EXPECT_EQ(a.config.bias, model::LoraBias::lora_only);
  EXPECT_EQ(a.config.target_modules, (std::vector<std::string>{"q_proj", "v_proj", "fc1"}));
  EXPECT_EQ(a.base.base_model_name_or_path, "tests/data/fixtures/tiny-bart");
  EXPECT_EQ(a.format, io::WeightFormat::safetensors);
  const auto b = io::open_adapter_folder(fixtures() / "lora-bart-bin");
  EXPECT_EQ(b.format, io::WeightFormat::pytorch_bin);
  EXPECT_EQ(b.config.r, 2);
  EXPECT_TRUE(b.config.use_rslora);
  EXPECT_EQ(b.config.bias, model::LoraBias::all);
  EXPECT_DOUBLE_EQ(b.config.lora_dropout, 0.1);
  EXPECT_EQ(b.config.target_modules.size(), 6u);
}

// A safetensors file's header (as JSON) and its data area.
std::pair<nlohmann::json, std::string> safetensors_parts(const fs::path& file) {
  const auto bytes = text_of(file);
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
  return {nlohmann::json::parse(bytes.substr(8, length)), bytes.substr(8 + length)};
}

// Loading PEFT's adapter and saving it again gives PEFT's adapter_config.json byte for byte, and its
// adapter_model.safetensors with the same header and the same data bytes (the Rust writer orders each entry's fields
// dtype, shape, data_offsets; fitsum's writer sorts them).
TEST(Adapter, SavingWritesPeftsFiles) {
  const auto source = fixtures() / "lora-bart";
  auto m = tiny_bart();
  const auto folder = io::open_adapter_folder(source);
  io::load_adapter(*m, folder);
  const auto out = temp_dir("adapter-resaved");
  io::save_adapter(*m, folder.config, out, folder.base);
  EXPECT_EQ(text_of(out / "adapter_config.json"), text_of(source / "adapter_config.json"));
  const auto [mine, mine_data] = safetensors_parts(out / "adapter_model.safetensors");
  const auto [peft, peft_data] = safetensors_parts(source / "adapter_model.safetensors");
  EXPECT_EQ(mine, peft);
  EXPECT_TRUE(mine_data == peft_data);
}

// all-linear, bias "all", rsLoRA, adapter_model.bin: the same fields and tensors as PEFT's (PEFT wrote all-linear
// as the names it expanded to, which are read and written back in their order).
TEST(Adapter, AllLinearWithEveryBiasSavesWhatPeftSaves) {
  const auto source = fixtures() / "lora-bart-bin";
  auto m = tiny_bart();
  const auto folder = io::open_adapter_folder(source);
  io::load_adapter(*m, folder);
  const auto out = temp_dir("adapter-all-linear");
  io::save_adapter(*m, folder.config, out, folder.base);
  auto mine = util::read_json_file(out / "adapter_config.json");
  auto peft = util::read_json_file(source / "adapter_config.json");
  EXPECT_EQ(mine, peft);
  io::SafetensorsReader saved(out / "adapter_model.safetensors");
  const auto again = io::open_adapter_folder(out);
  auto fresh = tiny_bart();
  io::load_adapter(*fresh, again);
  for (const auto& [name, tensor] : model::lora_state(*m, folder.config)) {
    const auto key = io::peft_key(*m, name);
    ASSERT_TRUE(saved.contains(key)) << key;
    EXPECT_TRUE(torch::equal(saved.read(key), tensor)) << key;
  }
  EXPECT_TRUE(saved.contains("base_model.model.model.encoder.layers.0.self_attn.q_proj.base_layer.bias"));
  EXPECT_TRUE(saved.contains("base_model.model.model.encoder.layers.0.self_attn_layer_norm.bias"));
}

// A fitsum-made adapter (random A and B, trained biases, a module saved whole) saved and loaded is bit-exact.
TEST(Adapter, SaveAndLoadIsBitExact) {
  model::LoraConfig config;
  config.r = 3;
  config.lora_alpha = 5.5;
  config.target_modules = {"k_proj", "fc2"};
  config.bias = model::LoraBias::all;
  config.modules_to_save = {"encoder.layers.1.final_layer_norm"};
  auto m = tiny_bart();
  model::apply_lora(*m, config, 7);
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : model::lora_state(*m, config)) t.add_(torch::randn_like(t));
  }
  const auto out = temp_dir("adapter-round-trip");
  io::save_adapter(*m, config, out, {"base/tiny-bart", ""});
  auto fresh = tiny_bart();
  const auto folder = io::open_adapter_folder(out);
  EXPECT_EQ(folder.base.base_model_name_or_path, "base/tiny-bart");
  EXPECT_EQ(folder.config.lora_alpha, 5.5);
  io::load_adapter(*fresh, folder);
  const auto want = model::lora_state(*m, config);
  const auto got = model::lora_state(*fresh, folder.config);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_TRUE(torch::equal(got[i].second, want[i].second)) << want[i].first;
  }
  for (const auto& item : fresh->named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), m->named_parameters()[item.key()])) << item.key();
  }
}

fs::path damaged_copy(const std::string& name) {
  const auto dir = temp_dir(name);
  for (const char* file : {"adapter_config.json", "adapter_model.safetensors"}) {
    fs::copy_file(fixtures() / "lora-bart" / file, dir / file);
  }
  fs::permissions(dir / "adapter_model.safetensors", fs::perms::owner_read | fs::perms::owner_write);
  return dir;
}

std::string load_error(const fs::path& dir) {
  return error_of<std::runtime_error>([&] {
    auto m = tiny_bart();
    io::load_adapter(*m, io::open_adapter_folder(dir));
  });
}

TEST(Adapter, ConfigsOfOtherMethodsOrVariantsAreRefusedByTheirField) {
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"use_dora", true}}, "use_dora is true: DoRA is not supported"},
      {{{"peft_type", "IA3"}}, "peft_type is \"IA3\"; fitsum reads LoRA adapters"},
      {{{"task_type", "CAUSAL_LM"}}, "task_type is \"CAUSAL_LM\""},
      {{{"r", "4"}}, "r must be a whole number"},
      {{{"r", 0}}, "r must be a whole number from 1"},
      {{{"r", 1000000000}}, "r must be a whole number from 1"},
      {{{"fan_in_fan_out", true}}, "fan_in_fan_out is true"},
      {{{"rank_pattern", {{"q_proj", 8}}}}, "rank_pattern is {\"q_proj\":8}"},
      {{{"layers_to_transform", {0}}}, "layers_to_transform is [0]"},
      {{{"target_modules", ".*q_proj"}}, "target_modules is the regular expression"},
      {{{"target_modules", {"q_proj", 3}}}, "target_modules must be a list of module names"},
      {{{"bias", "some"}}, "bias is not valid"},
      {{{"lora_dropout", 1.5}}, "lora_dropout must be in [0, 1)"},
  };
  for (const auto& [edit, want] : cases) {
    SCOPED_TRACE(edit.dump());
    const auto dir = damaged_copy("adapter-config");
    auto config = util::read_json_file(dir / "adapter_config.json");
    config.merge_patch(edit);
    util::write_file_atomic(dir / "adapter_config.json", config.dump(2));
    const auto error = load_error(dir);
    EXPECT_NE(error.find((dir / "adapter_config.json").string()), std::string::npos) << error;
    EXPECT_NE(error.find(want), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  const auto dir = damaged_copy("adapter-not-json");
  util::write_file_atomic(dir / "adapter_config.json", "{\"r\": 4,");
  EXPECT_NE(load_error(dir).find("adapter_config.json"), std::string::npos);
}

TEST(Adapter, DamagedOrMismatchedTensorsAreNamedWithTheirFile) {
  const auto weights = [](const fs::path& dir) { return (dir / "adapter_model.safetensors").string(); };
  const std::string q = "base_model.model.model.encoder.layers.0.self_attn.q_proj.";
  {  // a B of the wrong shape
    const auto dir = damaged_copy("adapter-shape");
    edit_safetensors_header(dir / "adapter_model.safetensors", [&](nlohmann::json& h) {
      h[q + "lora_B.weight"]["shape"] = {16, 8};
    });
    const auto error = load_error(dir);
    EXPECT_NE(error.find(weights(dir)), std::string::npos) << error;
    EXPECT_NE(error.find("'" + q + "lora_B.weight' has shape [16, 8], expected [32, 4]"), std::string::npos) << error;
  }
  {  // an A whose rank is not r
    const auto dir = damaged_copy("adapter-rank");
    auto config = util::read_json_file(dir / "adapter_config.json");
    config["r"] = 8;
    util::write_file_atomic(dir / "adapter_config.json", config.dump(2));
    const auto error = load_error(dir);
    EXPECT_NE(error.find("16 problems: 'base_model.model.model.decoder.layers.0.encoder_attn.q_proj.lora_A.weight' "
                         "has shape [4, 32], expected r = 8 rows"),
              std::string::npos)
        << error;
  }
  {  // a tensor missing, another one renamed
    const auto dir = damaged_copy("adapter-names");
    edit_safetensors_header(dir / "adapter_model.safetensors", [&](nlohmann::json& h) {
      h[q + "lora_X.weight"] = h[q + "lora_B.weight"];
      h.erase(q + "lora_B.weight");
    });
    const auto error = load_error(dir);
    EXPECT_NE(error.find("missing tensor '" + q + "lora_B.weight' (shape [32, 4])"), std::string::npos) << error;
    EXPECT_NE(error.find("unexpected tensor '" + q + "lora_X.weight'"), std::string::npos) << error;
    EXPECT_NE(error.find("2 problems"), std::string::npos) << error;
  }
  {  // the adapter of another base model
    const auto error = error_of<std::runtime_error>([&] {
      io::ModelSource source;
      source.model_name_or_path = (fixtures() / "tiny-t5").string();
      auto t5 = io::load_model(source, 0);
      io::load_adapter(*t5.model, io::open_adapter_folder(fixtures() / "lora-bart"));
    });
    EXPECT_NE(error.find("adapter_config.json' does not fit this base model"), std::string::npos) << error;
    EXPECT_NE(error.find("q_proj"), std::string::npos) << error;
  }
  {  // truncated weights
    const auto dir = damaged_copy("adapter-truncated");
    fs::resize_file(dir / "adapter_model.safetensors", 100);
    EXPECT_NE(load_error(dir).find(weights(dir)), std::string::npos);
  }
  {  // no weights, or a model folder given as the adapter
    const auto dir = damaged_copy("adapter-no-weights");
    fs::remove(dir / "adapter_model.safetensors");
    EXPECT_NE(load_error(dir).find("neither adapter_model.safetensors nor adapter_model.bin"), std::string::npos);
    EXPECT_NE(load_error(fixtures() / "tiny-bart").find("it is a full model folder: pass it as --model_name_or_path"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace fitsum::test
