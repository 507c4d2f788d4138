// PegasusTokenizer against the reference encodings in ../shared/data/{pegasus,pegasus-tiny}/spm_vectors.jsonl
// (made with the real sentencepiece library), and the places where HF's PegasusTokenizer differs from plain
// SentencePiece: literal special tokens, <unk> dropped when decoding, outer whitespace and space clean-up.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fitsum/tokenizer/pegasus_tokenizer.h"
#include "test_support.h"

namespace fitsum::tokenizer {
namespace {

using Ids = std::vector<TokenId>;

const PegasusTokenizer& pegasus() {
  static const PegasusTokenizer tokenizer = PegasusTokenizer::from_folder(test::source_dir() / "data" / "pegasus");
  return tokenizer;
}

std::vector<nlohmann::json> read_vectors(const std::string& model) {
  std::ifstream in(test::shared_dir() / "data" / model / "spm_vectors.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) {
    records.push_back(nlohmann::json::parse(line));
  }
  return records;
}

bool has_unknown_piece(const nlohmann::json& record) {
  for (const auto& id : record["sp_ids"]) {
    if (id.get<int>() == 2) {
      return true;
    }
  }
  return false;
}

void check_reference_vectors(const std::string& model, std::size_t expected_records, std::size_t expected_null) {
  const PegasusTokenizer tokenizer = PegasusTokenizer::from_folder(test::shared_dir() / "data" / model);
  const std::vector<nlohmann::json> records = read_vectors(model);
  ASSERT_EQ(records.size(), expected_records);
  std::size_t compared = 0;
  std::size_t decoded_exactly = 0;
  for (const auto& record : records) {
    if (record["hf_ids"].is_null()) {
      continue;
    }
    const std::string text = record["text"];
    const Ids expected = record["hf_ids"].get<Ids>();
    EXPECT_EQ(tokenizer.encode(text), expected) << model << " idx " << record["idx"];
    ++compared;
    if (!has_unknown_piece(record)) {
      // Without unknown pieces HF's decoding equals SentencePiece's, before the space clean-up.
      EXPECT_EQ(tokenizer.decode(expected, {true, false}), record["decoded"].get<std::string>())
          << model << " idx " << record["idx"];
      ++decoded_exactly;
    }
  }
  EXPECT_EQ(compared, expected_records - expected_null);
  EXPECT_GT(decoded_exactly, compared / 2);
}

TEST(PegasusTokenizer, ReproducesEveryReferenceEncodingOfThePegasusModel) {
  FITSUM_REQUIRE_SHARED();
  check_reference_vectors("pegasus", 228, 3);
}

TEST(PegasusTokenizer, ReproducesEveryReferenceEncodingOfTheTinyModel) {
  FITSUM_REQUIRE_SHARED();
  check_reference_vectors("pegasus-tiny", 98, 3);
}

TEST(PegasusTokenizer, HasHuggingFacesIdLayout) {
  const PegasusTokenizer& tokenizer = pegasus();
  EXPECT_EQ(tokenizer.vocab_size(), 96103);
  EXPECT_EQ(PegasusTokenizer::kUnkId, 105);
  EXPECT_EQ(tokenizer.id_to_token(0), "<pad>");
  EXPECT_EQ(tokenizer.id_to_token(1), "</s>");
  EXPECT_EQ(tokenizer.id_to_token(2), "<mask_1>");
  EXPECT_EQ(tokenizer.id_to_token(3), "<mask_2>");
  EXPECT_EQ(tokenizer.id_to_token(4), "<unk_2>");
  EXPECT_EQ(tokenizer.id_to_token(104), "<unk_102>");
  EXPECT_EQ(tokenizer.id_to_token(105), "<unk>");
  EXPECT_EQ(tokenizer.id_to_token(106), "<n>");
  EXPECT_EQ(tokenizer.id_to_token(107), ".");
  EXPECT_EQ(tokenizer.id_to_token(109), "\xE2\x96\x81the");
  EXPECT_THROW(tokenizer.id_to_token(96103), std::invalid_argument);
  EXPECT_EQ(tokenizer.encode(""), (Ids{1}));  // an empty dialogue still encodes, as HF does
  EXPECT_EQ(tokenizer.encode("   "), (Ids{1}));
}

TEST(PegasusTokenizer, SplitsLiteralSpecialTokensOutBeforeSentencePiece) {
  // Expected ids: HF splits the special strings out and encodes the rest with SentencePiece (offset 103);
  // the pieces were computed with python3-sentencepiece 0.1.97.
  const PegasusTokenizer& tokenizer = pegasus();
  EXPECT_EQ(tokenizer.encode("<mask_1> is a special token"), (Ids{2, 117, 114, 548, 10844, 1}));
  EXPECT_EQ(tokenizer.encode("text with </s> inside"), (Ids{1352, 122, 1, 865, 1}));
  EXPECT_EQ(tokenizer.encode("<unk> literal"), (Ids{105, 18645, 1}));
  EXPECT_EQ(tokenizer.encode("hello<pad>world"), (Ids{12253, 0, 278, 1}));
  // A '<' before a token is plain text ("<" is an unknown piece: "▁" 110 + <unk> 105).
  EXPECT_EQ(tokenizer.encode("<<mask_1>>"), (Ids{110, 105, 2, 2710, 1}));
  EXPECT_EQ(tokenizer.encode("<mask_2><unk_2><unk_57><unk_102>"), (Ids{3, 4, 59, 104, 1}));
  // Not special tokens: <unk_1>, <unk_103>, <unk_02> are plain text.
  EXPECT_EQ(tokenizer.encode("a <unk_1> b <unk_103> c"),
            (Ids{114, 110, 105, 28577, 42160, 2314, 3027, 110, 105, 28577, 940, 24298, 2314, 2895, 1}));
  EXPECT_EQ(tokenizer.encode("<unk_02>")[2], 28577);  // "unk" after "▁" and "<"
}

TEST(PegasusTokenizer, TruncationKeepsTheEosLast) {
  const PegasusTokenizer& tokenizer = pegasus();
  const Ids full = tokenizer.encode("Eric and Rob are going to watch a stand-up on youtube.");
  ASSERT_EQ(full.size(), 15u);
  EXPECT_EQ(tokenizer.encode("Eric and Rob are going to watch a stand-up on youtube.", 15), full);
  EXPECT_EQ(tokenizer.encode("Eric and Rob are going to watch a stand-up on youtube.", 100), full);
  EXPECT_EQ(tokenizer.encode("Eric and Rob are going to watch a stand-up on youtube.", 5),
            (Ids{6303, 111, 7374, 127, 1}));
  EXPECT_EQ(tokenizer.encode("Eric and Rob", 1), (Ids{1}));
  EXPECT_THROW(tokenizer.encode("Eric", 0), std::invalid_argument);
}

TEST(PegasusTokenizer, DecodingDropsUnknownPiecesThatSentencePieceShowsAsQuestionMarks) {
  // SentencePiece's DecodeIds renders <unk> as " ⁇ "; HF maps it to the special token <unk> (105), which
  // skip_special_tokens drops, and then strips the outer whitespace. Expected strings: the records' `decoded`
  // with the " ⁇ " pieces removed.
  const PegasusTokenizer& tokenizer = pegasus();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9", "caf\xC3\xA9 nave r\xC3\xA9sum\xC3\xA9"},  // café naïve résumé
      {"Stra\xC3\x9F"
       "e",
       "Strae"},                                                                    // Straße
      {"\xC4\xB0stanbul", "stanbul"},                                               // İstanbul
      {"I love it \xF0\x9F\x98\x8D\xF0\x9F\x99\x82\xF0\x9F\x91\x8D", "I love it"},  // emoji
      {"\xC2\xBD \xC2\xBC \xC2\xB2", "12 14 2"},                                    // ½ ¼ ²
      {"<file_gif>", "file_gif>"},
      {"\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE4\xB8\x96\xE7\x95\x8C", ""},  // こんにちは世界
  };
  for (const auto& [text, expected] : cases) {
    const Ids ids = tokenizer.encode(text);
    EXPECT_NE(std::find(ids.begin(), ids.end(), 105), ids.end()) << text;
    EXPECT_EQ(tokenizer.decode(ids), expected) << text;
  }
  // Kept, the special tokens are pasted verbatim between separately decoded runs of pieces.
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("Stra\xC3\x9F"
                                              "e"),
                             {false, true}),
            "Stra<unk>e</s>");
  EXPECT_EQ(tokenizer.decode(Ids{1352, 122, 1, 865, 1}, {false, true}), "text with</s>inside</s>");
  EXPECT_EQ(tokenizer.decode(Ids{1352, 122, 1, 865, 1, 0, 0}), "text with inside");
}

TEST(PegasusTokenizer, DecodingCleansUpSpacesLikeHuggingFace) {
  FITSUM_REQUIRE_SHARED();
  const PegasusTokenizer& tokenizer = pegasus();
  const std::vector<nlohmann::json> records = read_vectors("pegasus");
  // Two SAMSum test dialogues where clean_up_tokenization changes SentencePiece's text.
  const Ids dean = records.at(165)["hf_ids"].get<Ids>();
  EXPECT_NE(tokenizer.decode(dean, {true, false}).find("Dean: ??? Dean"), std::string::npos);
  EXPECT_NE(tokenizer.decode(dean).find("Dean:??? Dean"), std::string::npos);
  const Ids keith = records.at(170)["hf_ids"].get<Ids>();
  EXPECT_NE(tokenizer.decode(keith, {true, false}).find("so badly ... Keith"), std::string::npos);
  EXPECT_NE(tokenizer.decode(keith).find("so badly... Keith"), std::string::npos);
  EXPECT_EQ(clean_up_tokenization("Hi , you . Is n't it ? I 'm here ! He 's , we 've , they 're ' ok ' ."),
            "Hi, you. Isn't it? I'm here! He's, we've, they're'ok '.");
}

TEST(PegasusTokenizer, DecodingRejectsIdsOutsideTheVocabulary) {
  const PegasusTokenizer& tokenizer = pegasus();
  EXPECT_THROW(tokenizer.decode(Ids{107, -100}), std::invalid_argument);
  EXPECT_THROW(tokenizer.decode(std::vector<std::int64_t>{96103}), std::invalid_argument);
  EXPECT_EQ(tokenizer.decode(std::vector<std::int64_t>{12636, 397, 1}), "Hannah needs");
}

TEST(PegasusTokenizer, RefusesAFolderWithoutSpieceModel) {
  try {
    PegasusTokenizer::from_folder(test::temp_dir("empty"));
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_name"), std::string::npos);
  }
}

// The ids HF gives: encode the whole text, then keep max_length - 1 ids and </s>.
Ids encode_whole_then_truncate(const PegasusTokenizer& tokenizer, std::string_view text, std::size_t max_length,
                               bool& truncated) {
  Ids ids = tokenizer.encode(text);
  truncated = truncate_keeping_eos(ids, max_length);
  return ids;
}

TEST(PegasusTokenizer, BoundedEncodingGivesTheIdsOfWholeTextEncoding) {
  const PegasusTokenizer& tokenizer = pegasus();
  // Long texts made of real dialogues (CRLF turns, punctuation, emoticons, non-ASCII quotes), so that the bounded
  // encoder cuts them at many different places; plus literal special tokens and a long run without spaces.
  std::ifstream in(test::source_dir() / "data" / "samsum" / "train.jsonl");
  std::vector<std::string> texts(1);
  for (std::string line; std::getline(in, line) && texts.size() < 12;) {
    texts.back() += nlohmann::json::parse(line)["dialogue"].get<std::string>() + " <mask_1> ";
    if (texts.back().size() > 8000) texts.emplace_back();
  }
  texts.push_back(std::string(10000, 'x') + " tail of the text " + std::string(5000, 'y'));
  std::size_t compared = 0;
  for (const auto& text : texts) {
    for (const std::size_t max_length : {1, 2, 7, 64, 511, 513, 1024, 3000, 100000}) {
      bool whole_cut = false, bounded_cut = false;
      const Ids whole = encode_whole_then_truncate(tokenizer, text, max_length, whole_cut);
      const Ids bounded = tokenizer.encode(text, max_length, &bounded_cut);
      ASSERT_EQ(bounded, whole) << "max_length " << max_length << " text of " << text.size() << " bytes";
      EXPECT_EQ(bounded_cut, whole_cut);
      ++compared;
    }
  }
  EXPECT_GE(compared, 90u);
}

TEST(PegasusTokenizer, AHundredMegabyteRecordCostsWhatItsFirstTokensCost) {
  // Before, the whole text was encoded and then truncated: 7 GB and minutes for 100 MB. Now the first 4 KiB
  // suffice for 128 ids, and the ids are those of that prefix.
  const PegasusTokenizer& tokenizer = pegasus();
  std::string text;
  text.reserve(100u << 20);
  while (text.size() < (100u << 20)) text += "Amanda: I baked cookies. Do you want some?\r\nJerry: Sure! ";
  bool cut = false;
  const Ids ids = tokenizer.encode(text, 128, &cut);
  EXPECT_TRUE(cut);
  ASSERT_EQ(ids.size(), 128u);
  EXPECT_EQ(ids.back(), PegasusTokenizer::kEosId);
  bool prefix_cut = false;
  EXPECT_EQ(encode_whole_then_truncate(tokenizer, std::string_view(text).substr(0, 4096), 128, prefix_cut), ids);
}

}  // namespace
}  // namespace fitsum::tokenizer
