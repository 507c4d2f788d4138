// The SentencePiece shim inside a binary that also links LibTorch (this test binary does): loading, encoding and
// decoding must work, and torch must keep working after the shim's protobuf has been loaded.
#include <gtest/gtest.h>

#include <fstream>

#include <torch/torch.h>

#include "fitsum/tokenizer/sentencepiece.h"
#include "test_support.h"

namespace fitsum::tokenizer {
namespace {

fs::path bundled_spiece() { return test::source_dir() / "data" / "pegasus" / "spiece.model"; }

TEST(SentencePiece, LoadsBesideTorchAndEncodesLikeTheReference) {
  // Touch torch first so that its protobuf is in the process before SentencePiece's.
  const torch::Tensor before = torch::arange(4, torch::kInt64);
  const SentencePieceModel model(bundled_spiece());
  EXPECT_EQ(model.piece_size(), 96000);
  EXPECT_EQ(model.unk_id(), 2);
  EXPECT_TRUE(model.is_unknown(2));
  EXPECT_TRUE(model.is_control(0));
  EXPECT_TRUE(model.is_control(1));
  EXPECT_FALSE(model.is_control(3));
  EXPECT_EQ(model.id_to_piece(3), "<n>");
  EXPECT_EQ(model.id_to_piece(6), "\xE2\x96\x81the");  // "▁the"
  // First SAMSum test summary (../shared/data/pegasus/spm_vectors.jsonl, idx 0).
  const std::vector<std::int32_t> ids =
      model.encode("Hannah needs Betty's number but Amanda doesn't have it. She needs to contact Larry.");
  const std::vector<std::int32_t> expected = {12533, 294, 17276, 28, 13,  241, 52, 12092, 488,  28,
                                              41,    30,  23,    4,  349, 294, 9,  368,   9812, 4};
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(model.decode(ids), "Hannah needs Betty's number but Amanda doesn't have it. She needs to contact Larry.");
  const torch::Tensor after = torch::tensor(std::vector<std::int64_t>(ids.begin(), ids.end()));
  EXPECT_EQ(after.sum().item<std::int64_t>() - before.sum().item<std::int64_t>(), 53979 - 6);
}

TEST(SentencePiece, UnknownCharactersDecodeToTheQuestionMarkGlyph) {
  const SentencePieceModel model(bundled_spiece());
  const std::vector<std::int32_t> ids = model.encode(
      "Stra\xC3\x9F"
      "e");  // "Straße"
  EXPECT_EQ(ids, (std::vector<std::int32_t>{26056, 2, 223}));
  EXPECT_EQ(model.decode(ids), "Stra \xE2\x81\x87 e");  // "Stra ⁇ e"
}

TEST(SentencePiece, LongTextsGrowTheBuffer) {
  const SentencePieceModel model(bundled_spiece());
  // "½" normalizes (NFKC) to three characters, so the pieces outnumber half the bytes.
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text += "\xC2\xBD ";
  }
  const std::vector<std::int32_t> ids = model.encode(text);
  EXPECT_EQ(ids.size(), 200u * 3u);
  EXPECT_EQ(std::vector<std::int32_t>(ids.begin(), ids.begin() + 3), (std::vector<std::int32_t>{202, 2, 419}));
}

TEST(SentencePiece, ErrorsNameTheFileAndTheBadId) {
  try {
    SentencePieceModel model(test::temp_dir("missing") / "spiece.model");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("spiece.model"), std::string::npos);
  }
  const fs::path bogus = test::temp_dir("bogus") / "spiece.model";
  std::ofstream(bogus) << "not a model";
  EXPECT_THROW(SentencePieceModel model(bogus), std::runtime_error);
  const SentencePieceModel model(bundled_spiece());
  EXPECT_THROW(model.decode({96000}), std::invalid_argument);
  EXPECT_THROW(model.id_to_piece(-1), std::invalid_argument);
  EXPECT_TRUE(sentencepiece_library_path().filename() == kSentencePieceLibraryName);
}

}  // namespace
}  // namespace fitsum::tokenizer
