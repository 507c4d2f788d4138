// BartTokenizer and T5Tokenizer against the ids and texts of Hugging Face's slow tokenizers
// (tests/data/tokenizers/*.jsonl, written by tests/data/make_family_fixtures.py with transformers): edge cases
// (whitespace classes, literal special tokens, sentinels, emoji, scripts), the bundled SAMSum sample with truncation
// and decoding, and an id hash of every SAMSum record in ../shared. Plus load_tokenizer's choice of family.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "fitsum/families/family.h"
#include "fitsum/tokenizer/bart_tokenizer.h"
#include "fitsum/tokenizer/byte_level_bpe.h"
#include "fitsum/tokenizer/pegasus_tokenizer.h"
#include "fitsum/tokenizer/t5_tokenizer.h"
#include "fitsum/util/files.h"
#include "test_support.h"

namespace fitsum::tokenizer {
namespace {

using Ids = std::vector<TokenId>;

fs::path vectors_dir() { return test::source_dir() / "tests" / "data" / "tokenizers"; }
fs::path fixture(const std::string& name) { return test::source_dir() / "tests" / "data" / "fixtures" / name; }

struct Vectors {
  nlohmann::json header;
  std::vector<nlohmann::json> records;
};

Vectors read_vectors(const std::string& name) {
  std::ifstream in(vectors_dir() / (name + ".jsonl"));
  Vectors vectors;
  std::string line;
  if (!std::getline(in, line)) throw std::runtime_error("no vectors " + name);
  vectors.header = nlohmann::json::parse(line);
  while (std::getline(in, line)) vectors.records.push_back(nlohmann::json::parse(line));
  return vectors;
}

const BartTokenizer& gpt2() {
  static const BartTokenizer tokenizer = BartTokenizer::from_folder(test::source_dir() / "data" / "gpt2");
  return tokenizer;
}

const T5Tokenizer& t5_over_pegasus_model() {
  static const T5Tokenizer tokenizer(test::source_dir() / "data" / "pegasus" / "spiece.model");
  return tokenizer;
}

// FNV-1a 64 over the ids as little-endian int32, as the generator hashes them.
std::string fnv1a64(const Ids& ids) {
  std::uint64_t hash = 0xCBF29CE484222325ULL;
  for (const TokenId id : ids) {
    const auto value = static_cast<std::uint32_t>(id);
    for (int shift = 0; shift < 32; shift += 8) {
      hash ^= (value >> shift) & 0xFF;
      hash *= 0x100000001B3ULL;
    }
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

void expect_special_ids(const Tokenizer& tokenizer, const nlohmann::json& header) {
  EXPECT_EQ(tokenizer.vocab_size(), header["len"].get<TokenId>());
  for (const auto& [token, id] : header["special_ids"].items()) {
    EXPECT_EQ(tokenizer.id_to_token(id.get<TokenId>()), token);
    EXPECT_TRUE(tokenizer.is_special(id.get<TokenId>())) << token;
  }
}

// Every record: ids, truncation to 16, decoded text with and without clean-up, and with special tokens kept.
void expect_vectors(const Tokenizer& tokenizer, const std::string& name) {
  const Vectors vectors = read_vectors(name);
  expect_special_ids(tokenizer, vectors.header);
  ASSERT_GT(vectors.records.size(), 300u);
  for (const auto& record : vectors.records) {
    const std::string text = record["text"];
    const std::string where = name + " " + record["source"].get<std::string>();
    const Ids ids = record["ids"].get<Ids>();
    ASSERT_EQ(tokenizer.encode(text), ids) << where;
    EXPECT_EQ(tokenizer.encode(text, 16), record["truncated_16"].get<Ids>()) << where;
    EXPECT_EQ(tokenizer.decode(ids), record["decoded"].get<std::string>()) << where;
    EXPECT_EQ(tokenizer.decode(ids, {true, false}), record["decoded_no_cleanup"].get<std::string>()) << where;
    EXPECT_EQ(tokenizer.decode(ids, {false, true}), record["decoded_with_special"].get<std::string>()) << where;
    if (!record.contains("tokens")) continue;  // token strings are written for the edge cases
    for (std::size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(tokenizer.id_to_token(ids[i]), record["tokens"][i].get<std::string>()) << where << " token " << i;
    }
  }
}

// Every SAMSum record of ../shared, in the generator's chunks of records: token count and hash of the ids of each
// record's dialogue then summary, in order.
void expect_samsum_hashes(const Tokenizer& tokenizer, const std::string& name) {
  const Vectors vectors = read_vectors(name);
  std::map<std::string, std::vector<nlohmann::json>> splits;
  for (const std::string split : {"train", "validation", "test"}) {
    std::ifstream in(test::shared_dir() / "data" / "samsum" / (split + ".jsonl"));
    for (std::string line; std::getline(in, line);) splits[split].push_back(nlohmann::json::parse(line));
  }
  std::size_t records = 0;
  for (const auto& chunk : vectors.records) {
    const auto& split = splits.at(chunk[0].get<std::string>());
    const auto first = chunk[1].get<std::size_t>();
    const auto count = chunk[2].get<std::size_t>();
    Ids ids;
    for (std::size_t i = first; i < first + count; ++i) {
      for (const char* column : {"dialogue", "summary"}) {
        const Ids part = tokenizer.encode(split.at(i)[column].get<std::string>());
        ids.insert(ids.end(), part.begin(), part.end());
      }
    }
    const std::string where = name + " " + chunk[0].get<std::string>() + " records " + std::to_string(first) + ".." +
                              std::to_string(first + count - 1);
    EXPECT_EQ(ids.size(), chunk[3].get<std::size_t>()) << where;
    EXPECT_EQ(fnv1a64(ids), chunk[4].get<std::string>()) << where;
    records += count;
  }
  EXPECT_EQ(records, 16369u);
}

TEST(BartTokenizer, ReproducesHuggingFaceOnGpt2Files) { expect_vectors(gpt2(), "bart-gpt2"); }

TEST(BartTokenizer, ReproducesHuggingFaceOnEverySamsumRecord) {
  FITSUM_REQUIRE_SHARED();
  expect_samsum_hashes(gpt2(), "bart-gpt2-samsum");
}

TEST(BartTokenizer, ReproducesHuggingFaceOnTheTinyFixturesBpe) {
  expect_vectors(BartTokenizer::from_folder(fixture("tiny-bart")), "bart-tiny");
}

TEST(BartTokenizer, ReadsTheSameTokenizerFromTokenizerJson) {
  // A folder with only tokenizer.json: its vocabulary, merges and added tokens give the same ids.
  const fs::path dir = test::temp_dir("bart_tokenizer_json");
  fs::copy_file(fixture("tiny-bart") / "tokenizer.json", dir / "tokenizer.json");
  const BartTokenizer from_json = BartTokenizer::from_folder(dir);
  const BartTokenizer from_files = BartTokenizer::from_folder(fixture("tiny-bart"));
  EXPECT_EQ(from_json.vocab_size(), from_files.vocab_size());
  EXPECT_EQ(from_json.mask_id(), from_files.mask_id());
  for (const auto& record : read_vectors("bart-tiny").records) {
    const std::string text = record["text"];
    EXPECT_EQ(from_json.encode(text), from_files.encode(text)) << record["source"];
  }
}

TEST(BartTokenizer, AppendsMissingSpecialTokensInHuggingFacesOrder) {
  // GPT-2's vocabulary has none of BART's special tokens: they follow its 50257 entries.
  EXPECT_EQ(gpt2().bos_id(), 50257);
  EXPECT_EQ(gpt2().eos_id(), 50258);
  EXPECT_EQ(gpt2().unk_id(), 50259);
  EXPECT_EQ(gpt2().pad_id(), 50260);
  EXPECT_EQ(gpt2().mask_id(), 50261);
  EXPECT_EQ(gpt2().vocab_size(), 50262);
}

TEST(BartTokenizer, MaskEatsTheSpaceBeforeIt) {
  const Ids with_space = gpt2().encode("Hello <mask>");
  const Ids without_space = gpt2().encode("Hello<mask>");
  EXPECT_EQ(with_space, without_space);
  EXPECT_EQ(with_space[with_space.size() - 2], gpt2().mask_id());
}

TEST(BartTokenizer, RefusesTextThatIsNotUtf8AndTruncationWithoutRoom) {
  EXPECT_THROW(gpt2().encode(std::string("caf\xC3", 4)), std::invalid_argument);
  EXPECT_THROW(gpt2().encode("hello", 1), std::invalid_argument);
  EXPECT_EQ(gpt2().encode("hello world", 2), (Ids{gpt2().bos_id(), gpt2().eos_id()}));
}

// GPT2Tokenizer.bpe() as transformers writes it: the lowest-ranked adjacent pair, every occurrence merged left to
// right, until no pair has a rank. fitsum merges through a heap instead; the two must agree on every word.
std::vector<std::string> reference_bpe(const std::string& word,
                                       const std::map<std::pair<std::string, std::string>, int>& ranks) {
  std::vector<std::string> symbols;
  for (const char c : word) symbols.emplace_back(1, c);
  while (symbols.size() > 1) {
    int best = -1;
    std::pair<std::string, std::string> bigram;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = ranks.find({symbols[i], symbols[i + 1]});
      if (it != ranks.end() && (best < 0 || it->second < best)) {
        best = it->second;
        bigram = it->first;
      }
    }
    if (best < 0) break;
    std::vector<std::string> merged;
    for (std::size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && symbols[i] == bigram.first && symbols[i + 1] == bigram.second) {
        merged.push_back(bigram.first + bigram.second);
        ++i;
      } else {
        merged.push_back(symbols[i]);
      }
    }
    symbols = std::move(merged);
  }
  return symbols;
}

// Random merge tables over {a, b, c} whose ranks are shuffled, so that a pair made by a merge often outranks the pair
// that made it (never so in a learned table, but a merges file may say anything), and words full of repeats
// ("aaaa": overlapping occurrences of one pair).
TEST(ByteLevelBpe, HeapMergingEqualsHuggingFacesRescanOnAdversarialTables) {
  std::mt19937 random(5);
  for (int table = 0; table < 40; ++table) {
    std::vector<std::string> symbols = {"a", "b", "c"};
    std::vector<ByteLevelBpe::Merge> merges;
    for (int m = 0; m < 12; ++m) {
      const auto& x = symbols[random() % symbols.size()];
      const auto& y = symbols[random() % symbols.size()];
      merges.emplace_back(x, y);
      symbols.push_back(x + y);
    }
    std::shuffle(merges.begin(), merges.end(), random);
    std::map<std::pair<std::string, std::string>, int> ranks;
    for (std::size_t r = 0; r < merges.size(); ++r) ranks[merges[r]] = static_cast<int>(r);  // a repeat keeps its last
    std::unordered_map<std::string, std::int32_t> vocab;
    for (const auto& symbol : symbols) vocab.emplace(symbol, static_cast<std::int32_t>(vocab.size()));
    const ByteLevelBpe bpe(vocab, merges);
    for (int w = 0; w < 200; ++w) {
      std::string word(1 + random() % 40, 'a');
      for (char& c : word) c = static_cast<char>('a' + random() % (w % 2 == 0 ? 3 : 1 + random() % 2));
      std::vector<std::string> tokens;
      bpe.tokenize(word, tokens);
      ASSERT_EQ(tokens, reference_bpe(word, ranks)) << "table " << table << ", word " << word;
    }
  }
}

// A "word" of two million random letters (one pre-token): the rescan of HF's bpe() is quadratic in it, hours of work;
// merging through the heap keeps it to a few seconds, and the tokens still spell the word.
TEST(ByteLevelBpe, AWordOfMillionsOfLettersIsMergedWithoutQuadraticWork) {
  std::mt19937 random(3);
  std::string word(2'000'000, 'a');
  for (char& c : word) c = static_cast<char>('a' + random() % 26);
  const auto ids = gpt2().encode(word, 64);
  EXPECT_EQ(ids.size(), 64u);
  const auto text = gpt2().decode(ids);
  EXPECT_EQ(text, word.substr(0, text.size()));
  EXPECT_GT(text.size(), 62u);
}

// With max_length, words past the first max_length ids are not merged (each word is merged on its own, so they
// cannot change the ids kept): the ids and the truncation flag are those of encoding everything and cutting.
TEST(BartTokenizer, TruncatedEncodingEqualsEncodingEverythingAndCutting) {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += i % 7 == 0 ? "Amanda: I baked cookies <mask> for you!\n" : "Jerry: sure, ";
  const auto whole = gpt2().encode(text);
  for (const std::size_t max_length : {2, 3, 17, 64, 1024}) {
    bool truncated = false;
    const auto cut = gpt2().encode(text, max_length, &truncated);
    auto expected = std::vector<TokenId>(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(max_length - 1));
    expected.push_back(gpt2().eos_id());
    EXPECT_EQ(cut, expected) << max_length;
    EXPECT_TRUE(truncated);
  }
  bool truncated = true;
  EXPECT_EQ(gpt2().encode("Jerry: sure", 64, &truncated), gpt2().encode("Jerry: sure"));
  EXPECT_FALSE(truncated);
  const auto exact = gpt2().encode("Jerry: sure");
  EXPECT_EQ(gpt2().encode("Jerry: sure", exact.size(), &truncated), exact);
  EXPECT_FALSE(truncated) << "exactly max_length ids are not cut";
  EXPECT_EQ(gpt2().encode("Jerry: sure", exact.size() - 1, &truncated).size(), exact.size() - 1);
  EXPECT_TRUE(truncated);
  // Text that is not UTF-8 past the kept ids (after a special token, in a part never merged) is refused all the same
  // (found by the bart_tokenizer fuzz target). The byte 0x9f, then "4" (\x34: an escape ends only at a non-hex digit).
  EXPECT_THROW(gpt2().encode("a <mask> b 123\x9f\x34", 3), std::invalid_argument);
  EXPECT_THROW(gpt2().encode("a b c d e f g h i j k 123\x9f\x34", 3), std::invalid_argument);
}

TEST(T5Tokenizer, ReproducesHuggingFaceOnALargeSentencePieceModel) {
  expect_vectors(t5_over_pegasus_model(), "t5-pegasus-spm");
}

TEST(T5Tokenizer, ReproducesHuggingFaceOnEverySamsumRecord) {
  FITSUM_REQUIRE_SHARED();
  expect_samsum_hashes(t5_over_pegasus_model(), "t5-pegasus-spm-samsum");
}

TEST(T5Tokenizer, ReproducesHuggingFaceOnTheTinyFixturesModel) {
  expect_vectors(T5Tokenizer::from_folder(fixture("tiny-t5")), "t5-tiny");
}

TEST(T5Tokenizer, PutsSentinelsAboveThePieces) {
  const T5Tokenizer& tokenizer = t5_over_pegasus_model();
  EXPECT_EQ(tokenizer.vocab_size(), 96000 + 100);
  EXPECT_EQ(tokenizer.sentinel_id(0), 96099);
  EXPECT_EQ(tokenizer.sentinel_id(99), 96000);
  EXPECT_EQ(tokenizer.id_to_token(96099), "<extra_id_0>");
  EXPECT_EQ(tokenizer.encode("<extra_id_0>"), (Ids{96099, 1}));
  EXPECT_EQ(tokenizer.encode("done </s>").back(), 1);
  EXPECT_NE(tokenizer.encode("done </s>").end()[-2], 1);  // no second </s>
}

TEST(T5Tokenizer, RefusesAModelWithoutT5sPieceLayout) {
  // PEGASUS's tiny model has <pad> 0, </s> 1, <unk> 2 as well; a BPE file is no SentencePiece model at all.
  EXPECT_THROW(T5Tokenizer(test::source_dir() / "data" / "gpt2" / "merges.txt"), std::runtime_error);
}

TEST(LoadTokenizer, ChoosesTheFamilyFromTheFolder) {
  EXPECT_EQ(families::load_tokenizer(fixture("tiny-bart"))->name(), "BartTokenizer");
  EXPECT_EQ(families::load_tokenizer(fixture("tiny-t5"))->name(), "T5Tokenizer");
  // config.json says t5, and the folder has no spiece.model: T5's error, not PEGASUS's or BART's
  try {
    families::load_tokenizer(fixture("tiny-t5-v1_1"));
    ADD_FAILURE() << "a T5 folder without spiece.model loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("T5 checkpoint"), std::string::npos) << e.what();
  }
  EXPECT_EQ(families::load_tokenizer(test::source_dir() / "data" / "pegasus")->name(), "PegasusTokenizer");
  EXPECT_EQ(families::load_tokenizer(test::source_dir() / "data" / "gpt2")->name(), "BartTokenizer");
  EXPECT_THROW(families::load_tokenizer(test::temp_dir("no_tokenizer")), std::runtime_error);
}

TEST(LoadTokenizer, EmptyTextIsTheTemplateAlone) {
  EXPECT_TRUE(gpt2().is_empty_text({gpt2().bos_id(), gpt2().eos_id()}));
  EXPECT_TRUE(t5_over_pegasus_model().is_empty_text({1}));
  EXPECT_FALSE(t5_over_pegasus_model().is_empty_text({5, 1}));
}

}  // namespace
}  // namespace fitsum::tokenizer
