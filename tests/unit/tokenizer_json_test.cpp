// A PEGASUS folder with tokenizer.json alone (what transformers 5 saves) tokenizes as its spiece.model does: the
// SentencePiece model rebuilt from tokenizer.json (tokenizer_json.h) against the original, on every SAMSum
// validation dialogue and summary and on the reference vectors' edge cases, for the real PEGASUS vocabulary and the
// tiny one (whose tokenizer.json was written by a newer transformers, with another normalizer sequence). Files
// that are not such a tokenizer are refused with the file and the field named.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fitsum/tokenizer/pegasus_tokenizer.h"
#include "test_support.h"

namespace fitsum::tokenizer {
namespace {

// A folder holding only `model`'s tokenizer.json from ../shared.
fs::path tokenizer_json_only(const std::string& model) {
  const fs::path dir = test::temp_dir("tokenizer-json-" + model);
  fs::copy_file(test::shared_dir() / "data" / model / "tokenizer.json", dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  return dir;
}

std::vector<std::string> texts_to_compare(const std::string& model) {
  std::vector<std::string> texts = {"",
                                    " ",
                                    "  leading and trailing spaces  ",
                                    "many     spaces\tand\ttabs\r\nand lines",
                                    "<n> a user-defined piece<n>twice <n>",
                                    "special <mask_1> tokens </s> <unk> <unk_7> inside",
                                    "unknown characters: \xE2\x98\x83 \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87",
                                    "full-width \xEF\xBC\xA1\xEF\xBC\xA2 and ligature \xEF\xAC\x81 (NFKC)",
                                    "lllll aaaaaaa ......... !!!!!!"};
  std::ifstream vectors(test::shared_dir() / "data" / model / "spm_vectors.jsonl");
  for (std::string line; std::getline(vectors, line);) texts.push_back(nlohmann::json::parse(line)["text"]);
  std::ifstream samsum(test::shared_dir() / "data" / "samsum" / "validation.jsonl");
  for (std::string line; std::getline(samsum, line);) {
    const auto record = nlohmann::json::parse(line);
    texts.push_back(record["dialogue"]);
    texts.push_back(record["summary"]);
  }
  return texts;
}

void expect_same_tokenizer(const std::string& model, std::size_t expected_texts) {
  const PegasusTokenizer original = PegasusTokenizer::from_folder(test::shared_dir() / "data" / model);
  const fs::path dir = tokenizer_json_only(model);
  ASSERT_EQ(PegasusTokenizer::tokenizer_file(dir), dir / "tokenizer.json");
  const PegasusTokenizer rebuilt = PegasusTokenizer::from_folder(dir);
  EXPECT_EQ(rebuilt.model_file(), dir / "tokenizer.json");
  ASSERT_EQ(rebuilt.vocab_size(), original.vocab_size());
  const auto texts = texts_to_compare(model);
  ASSERT_EQ(texts.size(), expected_texts);
  std::size_t differing = 0;
  for (const auto& text : texts) {
    const auto ids = original.encode(text);
    const auto rebuilt_ids = rebuilt.encode(text);
    if (ids != rebuilt_ids) {
      ADD_FAILURE() << model << ": different ids for: " << text.substr(0, 200);
      if (++differing > 5) break;
    }
    EXPECT_EQ(rebuilt.decode(ids), original.decode(ids));
  }
}

TEST(TokenizerJson, GivesTheIdsOfSpieceModelOnThePegasusVocabulary) {
  FITSUM_REQUIRE_SHARED();
  expect_same_tokenizer("pegasus", 9 + 228 + 2 * 818);
}

TEST(TokenizerJson, GivesTheIdsOfSpieceModelOnTheTinyVocabulary) {
  FITSUM_REQUIRE_SHARED();
  expect_same_tokenizer("pegasus-tiny", 9 + 98 + 2 * 818);
}

TEST(TokenizerJson, SpieceModelIsPreferredWhenBothArePresent) {
  FITSUM_REQUIRE_SHARED();
  const fs::path dir = test::shared_dir() / "data" / "pegasus-tiny";
  EXPECT_EQ(PegasusTokenizer::tokenizer_file(dir), dir / "spiece.model");
  EXPECT_EQ(PegasusTokenizer::tokenizer_file(test::temp_dir("tokenizer-json-none")), fs::path());
}

// Writes the tiny tokenizer.json after `edit` and returns the error loading it gives ("" when none).
std::string error_after(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(test::shared_dir() / "data" / "pegasus-tiny" / "tokenizer.json");
  nlohmann::json document = nlohmann::json::parse(in);
  edit(document);
  const fs::path dir = test::temp_dir("tokenizer-json-bad-" + name);
  std::ofstream(dir / "tokenizer.json") << document.dump();
  try {
    PegasusTokenizer::from_folder(dir);
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find((dir / "tokenizer.json").string()), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  }
  return "";
}

TEST(TokenizerJson, RefusesWhatIsNotPegasussTokenizerNamingTheField) {
  FITSUM_REQUIRE_SHARED();
  using nlohmann::json;
  struct Case {
    std::string name;
    std::function<void(json&)> edit;
    std::string expected;  // part of the error
  };
  const std::vector<Case> cases = {
      {"bpe", [](json& d) { d["model"]["type"] = "BPE"; }, "model.type: is BPE, not Unigram"},
      {"unk", [](json& d) { d["model"]["unk_id"] = 3; }, "model.unk_id: is 3"},
      {"pair", [](json& d) { d["model"]["vocab"][200] = "word"; }, "model.vocab[200]"},
      {"short",
       [](json& d) {
         d["model"]["vocab"] = json::array({json::array({"<pad>", 0.0})});
       },
       "model.vocab: has 1 entries"},
      {"layout", [](json& d) { d["model"]["vocab"][105][0] = "<oov>"; }, "model.vocab"},
      {"normalizer",
       [](json& d) {
         d["normalizer"] = json{{"type", "NFKC"}};
       },
       "normalizer: has no Precompiled"},
      {"charsmap", [](json& d) { d["normalizer"]["normalizers"][0]["precompiled_charsmap"] = "!!"; },
       "precompiled_charsmap: is not base64"},
      {"metaspace",
       [](json& d) {
         d["pre_tokenizer"] = json{{"type", "Whitespace"}};
       },
       "pre_tokenizer: has no Metaspace"},
      {"model", [](json& d) { d.erase("model"); }, "model: missing"},
      {"array", [](json& d) { d = json::array(); }, "model: missing"},
  };
  for (const auto& c : cases) {
    EXPECT_NE(error_after(c.name, c.edit).find(c.expected), std::string::npos) << c.name;
  }
}

TEST(TokenizerJson, RefusesATruncatedFileWithItsName) {
  FITSUM_REQUIRE_SHARED();
  const fs::path dir = test::temp_dir("tokenizer-json-truncated");
  std::ifstream in(test::shared_dir() / "data" / "pegasus-tiny" / "tokenizer.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir / "tokenizer.json") << text.substr(0, text.size() / 2);
  try {
    PegasusTokenizer::from_folder(dir);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fitsum::tokenizer
