// The pytorch_model.bin reader: every kind of state dict torch.save really writes reads back exactly (files made by
// tests/data/fixtures/torch-save/make_torch_save_cases.py), and crafted archives that crashed LibTorch's unpickler,
// read heap bytes into weights or referred to Python globals are refused with a message naming file and cause.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fitsum/io/checkpoint.h"
#include "fitsum/io/pytorch_bin.h"
#include "fitsum/util/files.h"
#include "test_support.h"
#include "torch_archive.h"

namespace fitsum::test {
namespace {

const fs::path kCases = source_dir() / "tests" / "data" / "fixtures" / "torch-save";

std::string open_error(const std::string& bytes) {
  try {
    io::PytorchBinReader reader(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "crafted.bin");
    for (const auto& t : reader.tensors()) reader.read(t.name);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// A valid two-tensor archive, the starting point of each crafted defect.
std::string storage_of_four() { return float_bytes({1, 2, 3, 4}); }

TEST(PytorchBin, EveryKindOfStateDictTorchSaveWritesReadsBackExactly) {
  const auto expected = nlohmann::ordered_json::parse(util::read_file(kCases / "expected.json"));
  for (const auto& [file, tensors] : expected.items()) {
    io::PytorchBinReader reader(kCases / file);
    ASSERT_EQ(reader.tensors().size(), tensors.size()) << file;
    std::size_t index = 0;
    for (const auto& [name, want] : tensors.items()) {
      EXPECT_EQ(reader.tensors()[index++].name, name) << file;  // the state dict's order
      const auto t = reader.read(name);
      EXPECT_EQ(std::string(c10::toString(t.scalar_type())), want["dtype"] == "float32"    ? "Float"
                                                             : want["dtype"] == "float16"  ? "Half"
                                                             : want["dtype"] == "bfloat16" ? "BFloat16"
                                                             : want["dtype"] == "float64"  ? "Double"
                                                             : want["dtype"] == "int64"    ? "Long"
                                                                                           : "Bool")
          << file << " " << name;
      EXPECT_EQ(t.sizes().vec(), want["shape"].get<std::vector<std::int64_t>>()) << file << " " << name;
      const auto values = t.to(torch::kDouble).flatten();
      const auto want_values = want["values"].get<std::vector<double>>();
      ASSERT_EQ(values.numel(), static_cast<std::int64_t>(want_values.size())) << file << " " << name;
      for (std::size_t i = 0; i < want_values.size(); ++i) {
        EXPECT_EQ(values[static_cast<std::int64_t>(i)].item<double>(), want_values[i]) << file << " " << name;
      }
    }
  }
}

TEST(PytorchBin, ViewsIntoASharedStorageKeepTheirOffsetsAndStrides) {
  io::PytorchBinReader reader(kCases / "views.bin");
  const auto base = torch::arange(24, torch::kFloat).reshape({4, 6});
  EXPECT_TRUE(torch::equal(reader.read("row_slice"), base.slice(0, 1, 3)));
  EXPECT_TRUE(torch::equal(reader.read("column"), base.select(1, 2)));
  EXPECT_TRUE(torch::equal(reader.read("transposed"), base.t()));
  EXPECT_EQ(reader.tensor("row_slice").storage_offset, 6);
  EXPECT_TRUE(reader.read("transposed").is_contiguous());
}

TEST(PytorchBin, ACraftedArchiveThatTorchSaveWouldWriteIsAccepted) {
  const auto pickle = pickle_state_dict({{"w", pickle_tensor("FloatStorage", "0", 4, 1, {3}, {1})}});
  const auto bytes = torch_archive(pickle, {{"0", storage_of_four()}});
  io::PytorchBinReader reader(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "ok.bin");
  EXPECT_TRUE(torch::equal(reader.read("w"), torch::tensor({2.f, 3.f, 4.f})));
}

TEST(PytorchBin, OpcodesThatCrashedLibTorchsUnpicklerAreRefused) {
  const auto message = open_error(torch_archive("\x80\x02R.", {}));
  EXPECT_NE(message.find("crafted.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("empty stack"), std::string::npos) << message;
  EXPECT_NE(open_error(torch_archive("\x80\x04\x95", {})).find("protocol 2"), std::string::npos);
  EXPECT_NE(open_error(torch_archive("\x80\x02]q\x00.", {})).find("opcode 0x5d"), std::string::npos);
}

TEST(PytorchBin, StorageOffsetsAndSizesOutsideTheRecordAreRefused) {
  const auto with = [](std::int64_t numel, std::int64_t offset, std::vector<std::int64_t> sizes,
                       std::vector<std::int64_t> strides) {
    const auto pickle = pickle_state_dict({{"w", pickle_tensor("FloatStorage", "0", numel, offset, sizes, strides)}});
    return open_error(torch_archive(pickle, {{"0", float_bytes({1, 2, 3, 4})}}));
  };
  // The offset 10^6 crashed copy_; 100 past a small storage read heap bytes into the weights.
  EXPECT_NE(with(4, 1000000, {4}, {1}).find("tensor 'w' reaches element 1000003 of storage '0', which has 4"),
            std::string::npos)
      << with(4, 1000000, {4}, {1});
  EXPECT_NE(with(4, 100, {2}, {1}).find("reaches element 101"), std::string::npos);
  EXPECT_NE(with(4, 0, {2, 3}, {1, 2}).find("reaches element 5"), std::string::npos);
  EXPECT_NE(with(5, 0, {4}, {1}).find("holds 16 bytes, but 5 elements"), std::string::npos);
  EXPECT_NE(with(4, 0, {1LL << 40, 1LL << 40}, {1, 1}).find("overflow"), std::string::npos);
  EXPECT_NE(with(4, 0, {4}, {-1}).find("non-negative"), std::string::npos);
  EXPECT_EQ(with(4, 4, {0}, {1}), "");  // an empty view at the end of its storage is fine
}

TEST(PytorchBin, GlobalsAStateDictNeverNeedsAreRefusedByName) {
  const auto message =
      open_error(torch_archive("\x80\x02"
                               "cos\nsystem\n" +
                                   pickle_string("id") + "\x85R.",
                               {}));
  EXPECT_NE(message.find("'os.system'"), std::string::npos) << message;
  const auto storage = open_error(torch_archive(
      pickle_state_dict({{"w", pickle_tensor("DoubleTensor", "0", 4, 0, {4}, {1})}}), {{"0", storage_of_four()}}));
  EXPECT_NE(storage.find("'torch.DoubleTensor'"), std::string::npos) << storage;
}

TEST(PytorchBin, StructuresThatCouldRecurseOrLoopAreRefused) {
  // A dict that contains itself; tuples nested past the bound; values that are not tensors.
  // (String literals with \x00 are spelled with their lengths: a bare literal would end at the NUL.)
  EXPECT_NE(
      open_error(torch_archive(std::string("\x80\x02}q\x00(", 6) + pickle_string("a") + std::string("h\x00u.", 4), {}))
          .find("itself"),
      std::string::npos);
  EXPECT_NE(open_error(torch_archive("\x80\x02)" + std::string(100, '\x85') + ".", {})).find("nest deeper"),
            std::string::npos);
  EXPECT_NE(open_error(torch_archive(pickle_state_dict({{"n", pickle_int(3)}}), {})).find("'n' is not a tensor"),
            std::string::npos);
  const auto twice = pickle_state_dict({{"w", pickle_tensor("FloatStorage", "0", 4, 0, {4}, {1})},
                                        {"w", pickle_tensor("FloatStorage", "0", 4, 0, {4}, {1})}});
  EXPECT_NE(open_error(torch_archive(twice, {{"0", storage_of_four()}})).find("'w' is stored twice"),
            std::string::npos);
  const auto retyped = pickle_state_dict({{"a", pickle_tensor("FloatStorage", "0", 4, 0, {4}, {1})},
                                          {"b", pickle_tensor("IntStorage", "0", 4, 0, {4}, {1})}});
  EXPECT_NE(open_error(torch_archive(retyped, {{"0", storage_of_four()}})).find("described twice"), std::string::npos);
}

TEST(PytorchBin, ArchivesOutsideWhatTorchSaveWritesAreRefused) {
  const auto pickle = pickle_state_dict({{"w", pickle_tensor("FloatStorage", "0", 4, 0, {4}, {1})}});
  const auto good = torch_archive(pickle, {{"0", storage_of_four()}});
  EXPECT_EQ(open_error(good), "");
  EXPECT_NE(open_error(good.substr(0, good.size() / 2)).find("end-of-directory"), std::string::npos);
  EXPECT_NE(open_error(torch_archive(pickle, {})).find("storage '0', which is missing"), std::string::npos);
  EXPECT_NE(open_error(stored_zip({{"archive/data.pkl", pickle}, {"archive/data/0", storage_of_four(), 8}}))
                .find("compressed"),
            std::string::npos);
  EXPECT_NE(open_error(stored_zip({{"archive/data.pkl", pickle}, {"other/data/0", storage_of_four()}}))
                .find("outside the archive folder"),
            std::string::npos);
  // A flipped bit in a storage, or in the pickle, fails the CRC-32 check.
  std::string flipped = good;
  flipped[flipped.find(storage_of_four())] ^= 1;
  EXPECT_NE(open_error(flipped).find("does not match its CRC-32"), std::string::npos);
  std::string bad_bool = torch_archive(pickle_state_dict({{"b", pickle_tensor("BoolStorage", "0", 2, 0, {2}, {1})}}),
                                       {{"0", std::string("\1\2")}});
  EXPECT_NE(open_error(bad_bool).find("neither 0 nor 1"), std::string::npos);
}

TEST(PytorchBin, AModelFolderWithAHostileBinFailsNamingTheFile) {
  FITSUM_REQUIRE_SHARED();
  const auto dir = temp_dir("hostile-bin");
  fs::copy_file(shared_dir() / "fixtures" / "tiny-pegasus" / "config.json", dir / "config.json");
  const auto pickle =
      pickle_state_dict({{"final_logits_bias", pickle_tensor("FloatStorage", "0", 4, 100, {1, 167}, {167, 1})}});
  write_bytes(dir / "pytorch_model.bin", torch_archive(pickle, {{"0", storage_of_four()}}));
  auto folder = io::open_model_folder(dir);
  try {
    io::open_tensor_source(folder);
    FAIL() << "a storage offset past its record was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("pytorch_model.bin"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fitsum::test
