// The Porter stemmer against NLTK 3.8's PorterStemmer (NLTK_EXTENSIONS mode): the 9400-token reference table of
// ../shared/data/rouge/porter_stems.tsv, and the examples of Porter's paper where NLTK keeps or changes them.
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "fitsum/eval/porter_stemmer.h"
#include "test_support.h"

namespace fitsum::eval {
namespace {

TEST(PorterStemmer, MatchesNltkOnEveryTokenOfTheReferenceTable) {
  FITSUM_REQUIRE_SHARED();
  const auto path = test::shared_dir() / "data" / "rouge" / "porter_stems.tsv";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  ASSERT_EQ(line, "token\tstem");
  int checked = 0;
  int mismatches = 0;
  while (std::getline(in, line)) {
    const std::size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << "line " << checked + 2 << ": " << line;
    const std::string token = line.substr(0, tab);
    const std::string expected = line.substr(tab + 1);
    const std::string stem = porter_stem(token);
    if (stem != expected) {
      ++mismatches;
      ADD_FAILURE() << token << ": expected " << expected << ", got " << stem;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 9400);
  EXPECT_EQ(mismatches, 0);
}

TEST(PorterStemmer, FollowsThePaperExamples) {
  // Step 1a.
  EXPECT_EQ(porter_stem("caresses"), "caress");
  EXPECT_EQ(porter_stem("ponies"), "poni");
  EXPECT_EQ(porter_stem("caress"), "caress");
  EXPECT_EQ(porter_stem("cats"), "cat");
  // Step 1b.
  EXPECT_EQ(porter_stem("feed"), "feed");
  EXPECT_EQ(porter_stem("agreed"), "agre");
  EXPECT_EQ(porter_stem("plastered"), "plaster");
  EXPECT_EQ(porter_stem("bled"), "bled");
  EXPECT_EQ(porter_stem("motoring"), "motor");
  EXPECT_EQ(porter_stem("sing"), "sing");
  EXPECT_EQ(porter_stem("conflated"), "conflat");
  EXPECT_EQ(porter_stem("hopping"), "hop");
  EXPECT_EQ(porter_stem("falling"), "fall");
  EXPECT_EQ(porter_stem("filing"), "file");
  // Steps 2 to 5.
  EXPECT_EQ(porter_stem("relational"), "relat");
  EXPECT_EQ(porter_stem("conditional"), "condit");
  EXPECT_EQ(porter_stem("generalization"), "gener");
  EXPECT_EQ(porter_stem("triplicate"), "triplic");
  EXPECT_EQ(porter_stem("hopeful"), "hope");
  EXPECT_EQ(porter_stem("goodness"), "good");
  EXPECT_EQ(porter_stem("adjustment"), "adjust");
  EXPECT_EQ(porter_stem("adoption"), "adopt");
  EXPECT_EQ(porter_stem("probate"), "probat");
  EXPECT_EQ(porter_stem("rate"), "rate");
  EXPECT_EQ(porter_stem("cease"), "ceas");
  EXPECT_EQ(porter_stem("controll"), "control");
  EXPECT_EQ(porter_stem("roll"), "roll");
}

TEST(PorterStemmer, AppliesTheNltkExtensions) {
  // Irregular forms bypass the rules.
  EXPECT_EQ(porter_stem("dying"), "die");
  EXPECT_EQ(porter_stem("skies"), "sky");
  EXPECT_EQ(porter_stem("innings"), "inning");
  EXPECT_EQ(porter_stem("news"), "news");
  EXPECT_EQ(porter_stem("succeed"), "succeed");
  // Four-letter -ies / -ied keep their e.
  EXPECT_EQ(porter_stem("dies"), "die");
  EXPECT_EQ(porter_stem("died"), "die");
  EXPECT_EQ(porter_stem("spied"), "spi");
  // y -> i only after a consonant that is not the whole stem.
  EXPECT_EQ(porter_stem("happy"), "happi");
  EXPECT_EQ(porter_stem("enjoy"), "enjoy");
  // Two-letter vowel-consonant stems count as cvc.
  EXPECT_EQ(porter_stem("used"), "use");
  // -alli runs step 2 again; -fulli and -logi are NLTK rules.
  EXPECT_EQ(porter_stem("radically"), "radic");
  EXPECT_EQ(porter_stem("hopefully"), "hope");
  EXPECT_EQ(porter_stem("geology"), "geolog");
  // Short words are left alone.
  EXPECT_EQ(porter_stem("is"), "is");
  EXPECT_EQ(porter_stem("a"), "a");
}

}  // namespace
}  // namespace fitsum::eval
