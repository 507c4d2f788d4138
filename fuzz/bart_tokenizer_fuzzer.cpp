// libFuzzer target: BART's tokenizer (GPT-2's byte-level BPE from the project's data/gpt2 vocab.json + merges.txt,
// or $FITSUM_GPT2_DIR) on arbitrary bytes. Checks, beyond not crashing or hanging: text that is not UTF-8 is refused
// the same way with and without max_length; the bounded encoder (words past max_length ids are not merged) gives the
// ids of encoding the whole text and cutting, as HF does; decoding any in-vocabulary ids works.
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "fitsum/tokenizer/bart_tokenizer.h"
#include "fuzz_support.h"

namespace {

const fitsum::tokenizer::BartTokenizer& tokenizer() {
  static const fitsum::tokenizer::BartTokenizer instance = [] {
    const char* dir = std::getenv("FITSUM_GPT2_DIR");
    return fitsum::tokenizer::BartTokenizer::from_folder(dir ? std::filesystem::path(dir)
                                                             : std::filesystem::path(FITSUM_SOURCE_DIR) / "data" /
                                                                   "gpt2");
  }();
  return instance;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using fitsum::tokenizer::TokenId;
  if (size < 2) return 0;
  const std::size_t max_length = 2 + (data[0] | (data[1] << 8)) % 2048;
  const auto text = fitsum::fuzz::as_text(data + 2, size - 2);
  const auto& t = tokenizer();
  std::vector<TokenId> whole, bounded;
  bool whole_refused = false, bounded_refused = false;
  try {
    whole = t.encode(text);
  } catch (const std::invalid_argument&) {
    whole_refused = true;
  }
  bool bounded_cut = false;
  try {
    bounded = t.encode(text, max_length, &bounded_cut);
  } catch (const std::invalid_argument&) {
    bounded_refused = true;
  }
  if (whole_refused != bounded_refused) __builtin_trap();
  if (whole_refused) return 0;
  const bool whole_cut = fitsum::tokenizer::truncate_keeping_eos(whole, max_length);
  if (bounded != whole || bounded_cut != whole_cut) __builtin_trap();
  (void)t.decode(bounded);
  std::vector<TokenId> ids;
  for (std::size_t i = 0; i + 1 < size; i += 2) ids.push_back((data[i] | (data[i + 1] << 8)) % t.vocab_size());
  (void)t.decode(ids, {false, false});
  return 0;
}
