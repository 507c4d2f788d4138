// libFuzzer target: the PEGASUS tokenizer on arbitrary bytes, with PEGASUS's real spiece.model ($FITSUM_SPIECE_MODEL,
// else the project's data/pegasus/spiece.model). Checks, beyond not crashing: the bounded encoder gives the ids of
// encoding the whole text and truncating (as HF does), and decoding any in-vocabulary ids works.
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "fitsum/tokenizer/pegasus_tokenizer.h"
#include "fuzz_support.h"

namespace {

const fitsum::tokenizer::PegasusTokenizer& tokenizer() {
  static const fitsum::tokenizer::PegasusTokenizer instance = [] {
    const char* path = std::getenv("FITSUM_SPIECE_MODEL");
    return fitsum::tokenizer::PegasusTokenizer(path ? std::filesystem::path(path)
                                                    : std::filesystem::path(FITSUM_SOURCE_DIR) / "data" / "pegasus" /
                                                          "spiece.model");
  }();
  return instance;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using fitsum::tokenizer::TokenId;
  if (size < 2) return 0;
  const std::size_t max_length = 1 + (data[0] | (data[1] << 8)) % 2048;
  const auto text = fitsum::fuzz::as_text(data + 2, size - 2);
  const auto& t = tokenizer();
  auto whole = t.encode(text);
  const bool whole_cut = fitsum::tokenizer::truncate_keeping_eos(whole, max_length);
  bool bounded_cut = false;
  const auto bounded = t.encode(text, max_length, &bounded_cut);
  if (bounded != whole || bounded_cut != whole_cut) __builtin_trap();
  (void)t.decode(bounded);
  std::vector<TokenId> ids;
  for (std::size_t i = 0; i + 1 < size; i += 2) ids.push_back((data[i] | (data[i + 1] << 8)) % t.vocab_size());
  (void)t.decode(ids, {false, false});
  return 0;
}
