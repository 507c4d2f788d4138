// The ROUGE tokenizer against rouge_score's tokenize(): the token lists recorded in
// ../shared/data/rouge/rouge_vectors.jsonl (with and without stemming) and the Unicode traps of str.lower().
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fitsum/eval/rouge_tokenizer.h"
#include "test_support.h"

namespace fitsum::eval {
namespace {

using Tokens = std::vector<std::string>;

TEST(RougeTokenizer, LowercasesAndSplitsOnEverythingButAsciiLettersAndDigits) {
  EXPECT_EQ(rouge_tokenize("Hannah needs Betty's number.", false), (Tokens{"hannah", "needs", "betty", "s", "number"}));
  EXPECT_EQ(rouge_tokenize("  \t10:30 in room 2B\r\n", false), (Tokens{"10", "30", "in", "room", "2b"}));
  EXPECT_EQ(rouge_tokenize("", false), Tokens{});
  EXPECT_EQ(rouge_tokenize(" ?! ... ", false), Tokens{});
}

TEST(RougeTokenizer, NonAsciiLettersSplitWords) {
  EXPECT_EQ(rouge_tokenize("Zoë and Chloé at the café", false), (Tokens{"zo", "and", "chlo", "at", "the", "caf"}));
  EXPECT_EQ(rouge_tokenize("Ａｍａｎｄａ ５ pm", false), (Tokens{"pm"}));  // fullwidth forms are not ASCII
  EXPECT_EQ(rouge_tokenize("zero\u200bwidth non\u00a0breaking", false), (Tokens{"zero", "width", "non", "breaking"}));
}

TEST(RougeTokenizer, LowercasesLikePythonStrLower) {
  // 'İ'.lower() is "i" + U+0307 (combining dot): the i stays, the dot splits the word.
  EXPECT_EQ(rouge_tokenize("İsmail sent a GIF", false), (Tokens{"i", "smail", "sent", "a", "gif"}));
  // KELVIN SIGN lowercases to an ASCII k.
  EXPECT_EQ(rouge_tokenize("300\u212A is hot", false), (Tokens{"300k", "is", "hot"}));
  // Uppercase non-ASCII letters whose lowercase is not ASCII still only separate.
  EXPECT_EQ(rouge_tokenize("ΑΒΓ Greek", false), (Tokens{"greek"}));
}

TEST(RougeTokenizer, InvalidUtf8OnlySeparates) {
  EXPECT_EQ(rouge_tokenize(std::string("ab\xff"
                                       "cd\xc4"),
                           false),
            (Tokens{"ab", "cd"}));
  EXPECT_EQ(rouge_tokenize(std::string("x\xe2\x84"), false), (Tokens{"x"}));  // a truncated Kelvin sign
}

TEST(RougeTokenizer, StemsOnlyTokensLongerThanThreeCharacters) {
  EXPECT_EQ(rouge_tokenize("was has this cats running", true), (Tokens{"was", "has", "thi", "cat", "run"}));
  EXPECT_EQ(rouge_tokenize("was has this cats running", false), (Tokens{"was", "has", "this", "cats", "running"}));
}

TEST(RougeTokenizer, ReproducesTheReferenceTokenLists) {
  FITSUM_REQUIRE_SHARED();
  std::ifstream in(test::shared_dir() / "data" / "rouge" / "rouge_vectors.jsonl");
  ASSERT_TRUE(in);
  std::string line;
  int records = 0;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    for (const auto& [mode, use_stemmer] : {std::pair{"nostem", false}, std::pair{"stem", true}}) {
      for (const char* side : {"reference", "prediction"}) {
        const Tokens expected = record["tokens"][mode][side].get<Tokens>();
        EXPECT_EQ(rouge_tokenize(record[side].get<std::string>(), use_stemmer), expected)
            << "record " << record["idx"] << " (" << record["category"] << "), " << side << ", " << mode;
      }
    }
    ++records;
  }
  EXPECT_EQ(records, 333);
}

}  // namespace
}  // namespace fitsum::eval
